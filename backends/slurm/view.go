package slurm

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// The backend keeps the cluster's job list as its agent's poller last
// read it (the view). slurmrestd has no watch: the poller asks every
// interval for the jobs changed since its last list, which slurmctld
// answers with nothing at all when none did, and Observe answers from the
// view instead of reading each job on every pass.

// ListJobs returns the cluster's jobs, asking slurmctld only whether any
// changed since the last list, and keeps the list, so that submits and
// Observe need no request of their own. The agent's poller calls it.
func (b *Backend) ListJobs(ctx context.Context) ([]JobInfo, error) {
	at := b.now()
	b.mu.Lock()
	since := b.lastUpdate
	b.mu.Unlock()
	l, err := b.Client.JobsSince(ctx, since)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if l.Unchanged {
		// The kept list is still the cluster's as of at.
		if b.lastUpdate == since && at.After(b.listedAt) {
			b.listedAt = at
			b.settledLocked()
		}
		return b.viewJobs, nil
	}
	if !at.After(b.listedAt) {
		return l.Jobs, nil // a newer list was kept meanwhile
	}
	byComment := make(map[string][]int32, len(l.Jobs))
	byID := make(map[int32]*JobInfo, len(l.Jobs))
	for i := range l.Jobs {
		j := &l.Jobs[i]
		byID[j.JobID] = j
		if strings.HasPrefix(j.Comment, CommentPrefix) {
			byComment[j.Comment] = append(byComment[j.Comment], j.JobID)
		}
	}
	b.listed, b.listedAt, b.view, b.viewJobs, b.lastUpdate = byComment, at, byID, l.Jobs, l.LastUpdate
	b.settledLocked()
	return l.Jobs, nil
}

// settledLocked drops the uncertain submits the kept list settles: one
// begun SubmitSettle after such a submit shows its job if it was made, so
// known answers from the list alone, with or without the entry.
func (b *Backend) settledLocked() {
	for c, at := range b.uncertain {
		if b.listedAt.After(at.Add(b.settle())) {
			delete(b.uncertain, c)
		}
	}
}

// errNotInView: the view cannot say; read the job.
var errNotInView = errors.New("the last job list does not settle the job's state")

// viewed answers Observe from the view, without a request: the job as the
// last list showed it; ErrJobNotFound when that list, taken after the job
// was made, no longer holds it (slurmctld forgot it, or reused its id); a
// pending job when this process submitted it after that list.
func (b *Backend) viewed(d *v1alpha1.Dispatch) (*JobInfo, error) {
	id, want := remoteID(d), Comment(d)
	if id <= 0 {
		return nil, errNotInView
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if j, ok := b.view[id]; ok {
		if j.Comment != want {
			return nil, ErrJobNotFound
		}
		cp := *j
		return &cp, nil
	}
	made, ours := b.submittedAt[want]
	ours = ours && b.submitted[want] == id
	switch {
	case b.listedAt.IsZero() || b.created.IsZero():
		return nil, errNotInView
	case ours && !b.listedAt.After(made):
		// Submitted after the last list: the next one shows it, and the
		// poller wakes the Dispatch then.
		return &JobInfo{JobID: id, Comment: want, JobState: []string{"PENDING"}}, nil
	case b.listedAt.After(laterOf(b.created, made)):
		return nil, ErrJobNotFound
	}
	return nil, errNotInView
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

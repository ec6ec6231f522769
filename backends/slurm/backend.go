package slurm

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
)

// RemoteKind is the RemoteRef kind of a Slurm job.
const RemoteKind = "SlurmJob"

// Backend runs Dispatches as Slurm batch jobs through slurmrestd.
type Backend struct {
	Client *Client
	// Target returns the current Target, whose spec holds the partition and
	// account mappings (an administrator may edit them at any time).
	Target func(ctx context.Context) (*v1alpha1.Target, error)
	// Topology returns the cluster's topology; nil means nodes only.
	Topology func() (*Topology, error)
	// OutputRoot is where the agent sees the cluster's filesystem, to read
	// job output for `trainyard logs` ("/" on a login node, a mount
	// elsewhere); empty turns logs off.
	OutputRoot string

	mu sync.Mutex
	// created is when this backend was made: a job list taken after it
	// holds every job an earlier incarnation of the agent submitted.
	created time.Time
	// listed is the last job list (ListJobs) and when it was taken.
	listed   map[string]int32 // comment -> newest job id
	listedAt time.Time
	// submitted records this process's submits by comment, since the last
	// list may predate them.
	submitted map[string]int32
}

// NewBackend returns a Backend for the target target returns.
func NewBackend(c *Client, target func(context.Context) (*v1alpha1.Target, error)) *Backend {
	return &Backend{Client: c, Target: target, created: time.Now(), submitted: map[string]int32{}}
}

// ListJobs lists the cluster's jobs and keeps the list, so submits can
// look a job up without a list of their own. The agent's poller calls it.
func (b *Backend) ListJobs(ctx context.Context) ([]JobInfo, error) {
	at := time.Now()
	jobs, err := b.Client.Jobs(ctx)
	if err != nil {
		return nil, err
	}
	byComment := make(map[string]int32, len(jobs))
	for i := range jobs {
		if c := jobs[i].Comment; strings.HasPrefix(c, CommentPrefix) && jobs[i].JobID > byComment[c] {
			byComment[c] = jobs[i].JobID
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if at.After(b.listedAt) {
		b.listed, b.listedAt = byComment, at
	}
	return jobs, nil
}

// existing returns the id of a job submitted for comment, 0 if none. It
// trusts the kept list only when it was taken after this backend was made
// (so it holds every job of an earlier agent) and adds this process's own
// submits; otherwise it lists afresh.
func (b *Backend) existing(ctx context.Context, comment string) (int32, error) {
	b.mu.Lock()
	id, fresh := b.submitted[comment], !b.created.IsZero() && b.listedAt.After(b.created)
	if id == 0 && fresh {
		id = b.listed[comment]
	}
	b.mu.Unlock()
	if id != 0 || fresh {
		return id, nil
	}
	if _, err := b.ListJobs(ctx); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.listed[comment], nil
}

var _ backends.Backend = (*Backend)(nil)
var _ backends.RemoteLister = (*Backend)(nil)

// Submit submits the job of d unless a job with its comment exists.
func (b *Backend) Submit(ctx context.Context, d *v1alpha1.Dispatch) (*v1alpha1.RemoteRef, error) {
	t, err := b.Target(ctx)
	if err != nil {
		return nil, err
	}
	job, err := Render(d, t)
	if err != nil {
		return nil, err
	}
	// Look up before submitting: a crash after a submit and before the
	// status write must find that job, not make a second one. The agent
	// works on one Dispatch in one worker at a time, and leader election
	// keeps it to one agent, so no other submit of d can race this one.
	id, err := b.existing(ctx, job.Comment)
	if err != nil {
		return nil, err
	}
	if id != 0 {
		return ref(id, job.Name), nil
	}
	id, err = b.Client.Submit(ctx, job)
	var he *HTTPError
	if errors.As(err, &he) && he.Permanent {
		return nil, fmt.Errorf("%w: %w", backends.ErrRejected, err)
	}
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	if b.submitted == nil {
		b.submitted = map[string]int32{}
	}
	b.submitted[job.Comment] = id
	b.mu.Unlock()
	return ref(id, job.Name), nil
}

func ref(id int32, name string) *v1alpha1.RemoteRef {
	return &v1alpha1.RemoteRef{Kind: RemoteKind, Name: name, ID: strconv.Itoa(int(id))}
}

// find returns the job of d: by id when known, else the newest job with
// its comment. The comment is checked either way, since a slurmctld that
// restarted without its state may reuse ids.
func (b *Backend) find(ctx context.Context, d *v1alpha1.Dispatch, id int32) (*JobInfo, error) {
	want := Comment(d)
	if id <= 0 {
		var err error
		if id, err = b.existing(ctx, want); err != nil {
			return nil, err
		}
		if id == 0 {
			return nil, ErrJobNotFound
		}
	}
	j, err := b.Client.Job(ctx, id)
	if err != nil {
		return nil, err
	}
	if j.Comment != want {
		return nil, ErrJobNotFound
	}
	return j, nil
}

func remoteID(d *v1alpha1.Dispatch) int32 {
	if d.Status.Remote == nil || d.Status.Remote.Kind != RemoteKind {
		return 0
	}
	id, err := strconv.ParseInt(d.Status.Remote.ID, 10, 32)
	if err != nil {
		return 0
	}
	return int32(id)
}

// Observe reports the job's state.
func (b *Backend) Observe(ctx context.Context, d *v1alpha1.Dispatch) (*backends.Status, error) {
	j, err := b.find(ctx, d, remoteID(d))
	if errors.Is(err, ErrJobNotFound) {
		return nil, fmt.Errorf("%w: %w", backends.ErrNotFound, err)
	}
	if err != nil {
		return nil, err
	}
	return StatusOf(j), nil
}

// Cancel cancels the job and reports gone once no process of it is left.
func (b *Backend) Cancel(ctx context.Context, d *v1alpha1.Dispatch) (bool, error) {
	j, err := b.find(ctx, d, remoteID(d))
	if errors.Is(err, ErrJobNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if Ended(j) {
		return true, nil
	}
	return false, b.Client.Cancel(ctx, j.JobID)
}

// ListRemote lists the live jobs this target's agent submitted.
func (b *Backend) ListRemote(ctx context.Context) ([]backends.RemoteWork, error) {
	t, err := b.Target(ctx)
	if err != nil {
		return nil, err
	}
	jobs, err := b.ListJobs(ctx)
	if err != nil {
		return nil, err
	}
	var out []backends.RemoteWork
	for i := range jobs {
		target, w, ok := ParseComment(jobs[i].Comment)
		if !ok || target != t.Name || Ended(&jobs[i]) {
			continue
		}
		w.Ref = *ref(jobs[i].JobID, jobs[i].Name)
		out = append(out, w)
	}
	return out, nil
}

// Delete cancels one job found by ListRemote.
func (b *Backend) Delete(ctx context.Context, w backends.RemoteWork) error {
	id, err := strconv.ParseInt(w.Ref.ID, 10, 32)
	if err != nil {
		return fmt.Errorf("slurm job id %q: %w", w.Ref.ID, err)
	}
	return b.Client.Cancel(ctx, int32(id))
}

// Capacity reads the nodes of the target's partitions.
func (b *Backend) Capacity(ctx context.Context) (*backends.Capacity, error) {
	t, err := b.Target(ctx)
	if err != nil {
		return nil, err
	}
	nodes, err := b.Client.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	var topo *Topology
	if b.Topology != nil {
		if topo, err = b.Topology(); err != nil {
			return nil, fmt.Errorf("read topology: %w", err)
		}
	}
	return CapacityOf(nodes, partitionsOf(t), topo), nil
}

func partitionsOf(t *v1alpha1.Target) map[string]bool {
	out := map[string]bool{}
	if t.Spec.Slurm != nil {
		for _, p := range t.Spec.Slurm.Partitions {
			out[p.Partition] = true
		}
	}
	return out
}

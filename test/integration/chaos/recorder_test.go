package chaos

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobset "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/slurm"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
)

// remoteCopy is one remote object trainyard made for a Workload: a JobSet
// (by UID) on a spoke or a Slurm job (by id), live from when it was first
// seen until it was seen deleted or finished.
type remoteCopy struct {
	Where    string // "spoke1/<jobset> <uid>" or "hpc/<job id>"
	Target   string
	Workload string // Workload UID
	Attempt  string
	Created  time.Time
	Ended    time.Time
	// Succeeded: the copy finished successfully (JobSet Completed, Slurm
	// COMPLETED with exit code 0).
	Succeeded bool
}

func (c *remoteCopy) live() bool { return c.Ended.IsZero() }

// recorder keeps every remote copy, from JobSet watches on each spoke API
// server and a slurmrestd job list read every slurmPoll, and samples after
// every change that no Workload has two live copies. It also keeps when
// each agent's Lease on the hub was seen renewed.
type recorder struct {
	start time.Time

	mu     sync.Mutex
	copies map[string]*remoteCopy
	// renewals are the moments each target's Lease was seen renewed.
	renewals   map[string][]time.Time
	samples    int
	violations []string
	// slurmErrors counts failed job list reads (a killed slurmrestd
	// connection, a busy slurmctld): they prove nothing either way.
	slurmErrors int
}

const slurmPoll = 250 * time.Millisecond

// startRecorder starts the watches and the Slurm poll; they run until ctx
// ends. It returns once every watch has synced.
func startRecorder(ctx context.Context) (*recorder, error) {
	r := &recorder{start: time.Now(), copies: map[string]*remoteCopy{}, renewals: map[string][]time.Time{}}
	if err := r.watchLeases(ctx); err != nil {
		return nil, err
	}
	for _, s := range env.fleet.Spokes {
		c, err := cache.New(s.Config, cache.Options{Scheme: kube.Scheme()})
		if err != nil {
			return nil, err
		}
		inf, err := c.GetInformer(ctx, &jobset.JobSet{})
		if err != nil {
			return nil, err
		}
		spoke := s.Name
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { r.jobSet(spoke, obj, false) },
			UpdateFunc: func(_, obj any) { r.jobSet(spoke, obj, false) },
			DeleteFunc: func(obj any) {
				if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				r.jobSet(spoke, obj, true)
			},
		}); err != nil {
			return nil, err
		}
		go func() { _ = c.Start(ctx) }()
		if !c.WaitForCacheSync(ctx) {
			return nil, fmt.Errorf("%s: JobSet watch did not sync", spoke)
		}
	}
	if err := r.pollSlurm(ctx); err != nil {
		return nil, err
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(slurmPoll):
			}
			if err := r.pollSlurm(ctx); err != nil {
				r.mu.Lock()
				r.slurmErrors++
				r.mu.Unlock()
			}
		}
	}()
	return r, nil
}

// watchLeases records every new version of an agent's Lease on the hub.
func (r *recorder) watchLeases(ctx context.Context) error {
	sel, err := labels.Parse(v1alpha1.LabelLeaseTarget)
	if err != nil {
		return err
	}
	c, err := cache.New(env.fleet.Hub.Config, cache.Options{Scheme: kube.Scheme(),
		ByObject: map[client.Object]cache.ByObject{&coordinationv1.Lease{}: {Label: sel}}})
	if err != nil {
		return err
	}
	inf, err := c.GetInformer(ctx, &coordinationv1.Lease{})
	if err != nil {
		return err
	}
	renewed := func(obj any) {
		if l, ok := obj.(*coordinationv1.Lease); ok {
			r.mu.Lock()
			target := l.Annotations[v1alpha1.AnnotationLeaseTarget]
			r.renewals[target] = append(r.renewals[target], time.Now())
			r.mu.Unlock()
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: renewed,
		UpdateFunc: func(old, obj any) {
			if o, ok := old.(client.Object); ok && o.GetResourceVersion() != obj.(client.Object).GetResourceVersion() {
				renewed(obj)
			}
		},
	}); err != nil {
		return err
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return fmt.Errorf("lease watch did not sync")
	}
	return nil
}

// silence is a target's longest time without a renewal of its Lease.
type silence struct {
	// From is when it began, as an offset from the window's start.
	From, Length time.Duration
}

// longestSilence is, per target, the longest time between from and to in
// which its Lease was not seen renewed.
func (r *recorder) longestSilence(from, to time.Time) map[string]silence {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]silence{}
	for target, times := range r.renewals {
		last := from
		for _, at := range append(slices.Clone(times), to) {
			if at.Before(from) {
				continue
			}
			if at.After(to) {
				at = to
			}
			if at.Sub(last) > out[target].Length {
				out[target] = silence{From: last.Sub(from), Length: at.Sub(last)}
			}
			last = at
		}
	}
	return out
}

// succeededSilent counts the copies that succeeded while their target's
// Lease had not been seen renewed for the lease duration.
func (r *recorder) succeededSilent(copies []remoteCopy) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range copies {
		if !c.Succeeded {
			continue
		}
		last := r.start
		for _, at := range r.renewals[c.Target] {
			if at.After(c.Ended) {
				break
			}
			last = at
		}
		if c.Ended.Sub(last) > leaseDuration {
			n++
		}
	}
	return n
}

// jobSet records a JobSet event.
func (r *recorder) jobSet(spoke string, obj any, deleted bool) {
	js, ok := obj.(*jobset.JobSet)
	if !ok {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	key := spoke + "/" + string(js.UID)
	c, known := r.copies[key]
	if !known {
		c = &remoteCopy{Where: spoke + "/" + js.Name + " " + string(js.UID), Target: spoke,
			Workload: js.Labels[v1alpha1.LabelWorkloadUID], Attempt: js.Labels[v1alpha1.LabelAttempt], Created: now}
		r.copies[key] = c
	}
	done := apimeta.IsStatusConditionTrue(js.Status.Conditions, string(jobset.JobSetCompleted))
	failed := apimeta.IsStatusConditionTrue(js.Status.Conditions, string(jobset.JobSetFailed))
	if c.live() && (deleted || done || failed) {
		c.Ended, c.Succeeded = now, done
	}
	if !known {
		r.sampleLocked(now)
	}
}

// pollSlurm reads every job slurmctld knows (MinJobAge keeps finished ones
// for 5 minutes, longer than the test) and records trainyard's by comment.
func (r *recorder) pollSlurm(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	jobs, err := env.rest.Jobs(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range jobs {
		j := &jobs[i]
		if !strings.HasPrefix(j.Comment, slurm.CommentPrefix) {
			continue
		}
		key := "slurm/" + strconv.Itoa(int(j.JobID))
		c, known := r.copies[key]
		if !known {
			target, w, _ := slurm.ParseComment(j.Comment)
			c = &remoteCopy{Where: target + "/" + strconv.Itoa(int(j.JobID)), Target: target,
				Workload: workloadOfComment(j.Comment), Attempt: strconv.Itoa(int(w.Attempt)), Created: now}
			r.copies[key] = c
		}
		if c.live() && slurm.Ended(j) {
			c.Ended = now
			c.Succeeded = slices.Contains(j.JobState, "COMPLETED") && exitZero(j)
		}
	}
	r.sampleLocked(now)
	return nil
}

// workloadOfComment is the uid= part of a trainyard job comment.
func workloadOfComment(c string) string {
	if i := strings.LastIndex(c, "/uid="); i >= 0 {
		return c[i+len("/uid="):]
	}
	return ""
}

func exitZero(j *slurm.JobInfo) bool {
	return j.ExitCode == nil || j.ExitCode.ReturnCode == nil || j.ExitCode.ReturnCode.Number == 0
}

// sampleLocked records a violation for every Workload with more than one
// live copy now.
func (r *recorder) sampleLocked(now time.Time) {
	r.samples++
	live := map[string][]string{}
	for _, c := range r.copies {
		if c.live() {
			live[c.Workload] = append(live[c.Workload], c.Where+" attempt "+c.Attempt)
		}
	}
	for wl, where := range live {
		if len(where) > 1 && len(r.violations) < 20 {
			sort.Strings(where)
			r.violations = append(r.violations, fmt.Sprintf("at +%v workload %s has %d live copies: %s",
				now.Sub(r.start).Round(10*time.Millisecond), wl, len(where), strings.Join(where, ", ")))
		}
	}
}

// snapshot returns a copy of every remote copy, the sample count and the
// violations.
func (r *recorder) snapshot() ([]remoteCopy, int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]remoteCopy, 0, len(r.copies))
	for _, c := range r.copies {
		out = append(out, *c)
	}
	return out, r.samples, append([]string(nil), r.violations...)
}

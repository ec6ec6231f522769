package outage

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobset "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
)

// slurmPoll paces the recorder's reads of the Slurm cluster.
const slurmPoll = time.Second

// recorder notes every sign that the jobs' remote work was stopped or
// started again, from before an outage until the test ends: watches on the
// spoke see each JobSet and pod of the job created, deleted or leaving
// Running, and a slurmrestd poll sees any other Slurm job of the job, its
// job leaving RUNNING, and its process's stamp file. None of it touches
// the hub.
type recorder struct {
	js *jobs

	mu    sync.Mutex
	found []string
	seen  map[string]bool
	// slurmErrors counts failed polls; they prove nothing either way.
	slurmErrors int
}

// startRecorder starts the spoke watches (returning once they have synced)
// and the Slurm poll; both run until the test ends.
func startRecorder(t *testing.T, js *jobs) *recorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r := &recorder{js: js, seen: map[string]bool{}}
	ns := js.kube.dispatch.Status.Remote.Namespace
	c, err := cache.New(js.kube.spoke.Config, cache.Options{Scheme: kube.Scheme(), DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range []client.Object{&jobset.JobSet{}, &corev1.Pod{}} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerDetailedFuncs{
			AddFunc: func(obj any, initial bool) {
				if !initial {
					r.spoke(obj, "created")
				}
			},
			UpdateFunc: func(old, obj any) { r.spokeUpdate(old, obj) },
			DeleteFunc: func(obj any) {
				if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				r.spoke(obj, "deleted")
			},
		}); err != nil {
			t.Fatal(err)
		}
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the spoke watches did not sync")
	}
	go func() {
		for {
			r.pollSlurm(ctx)
			select {
			case <-ctx.Done():
				return
			case <-time.After(slurmPoll):
			}
		}
	}()
	return r
}

// ours reports whether obj is the kube job's JobSet (or another for the
// same TrainJob) or one of its pods, and names it.
func (r *recorder) ours(obj any) (string, bool) {
	k := r.js.kube
	switch o := obj.(type) {
	case *jobset.JobSet:
		return "JobSet " + o.Name + " " + string(o.UID), o.Labels[v1alpha1.LabelTrainJobUID] == string(k.tj.UID)
	case *corev1.Pod:
		return "pod " + o.Name + " " + string(o.UID), o.Labels[jobset.JobSetNameKey] == k.dispatch.Status.Remote.Name
	}
	return "", false
}

// spoke notes what happened to obj if it is ours.
func (r *recorder) spoke(obj any, what string) {
	if name, ok := r.ours(obj); ok {
		r.note(name + " " + what)
	}
}

// spokeUpdate notes a deletion that begins and a pod that leaves Running.
func (r *recorder) spokeUpdate(old, obj any) {
	o, ok := obj.(client.Object)
	if !ok {
		return
	}
	if prev, ok := old.(client.Object); ok && prev.GetDeletionTimestamp() == nil && o.GetDeletionTimestamp() != nil {
		r.spoke(obj, "being deleted")
	}
	if p, ok := obj.(*corev1.Pod); ok && p.Status.Phase != corev1.PodRunning {
		r.spoke(obj, "is "+string(p.Status.Phase))
	}
}

// pollSlurm reads every job slurmctld knows and the stamp file once.
func (r *recorder) pollSlurm(ctx context.Context) {
	h := r.js.hpc
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	list, err := env.rest.Jobs(ctx)
	if err != nil {
		r.mu.Lock()
		r.slurmErrors++
		r.mu.Unlock()
		return
	}
	for _, j := range list {
		if !strings.HasSuffix(j.Comment, "/uid="+string(h.dispatch.Spec.Workload.UID)) {
			continue // not of this job's Workload (the comment is slurm.Comment's)
		}
		switch {
		case j.JobID != h.slurmID:
			r.note(fmt.Sprintf("Slurm job %d of %s is %v", j.JobID, h.tj.Name, j.JobState))
		case len(j.JobState) != 1 || j.JobState[0] != "RUNNING" || j.RestartCount != 0:
			r.note(fmt.Sprintf("Slurm job %d is %v after %d restarts", j.JobID, j.JobState, j.RestartCount))
		}
	}
	switch starts, ends, err := readStamps(h.stamps); {
	case err != nil:
		r.note(err.Error())
	case len(starts) != 1 || len(ends) != 0:
		r.note(fmt.Sprintf("the Slurm job's process stamps: starts %v, ends %v", starts, ends))
	}
}

// note records a finding once.
func (r *recorder) note(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen[s] {
		return
	}
	r.seen[s] = true
	r.found = append(r.found, time.Now().UTC().Format("15:04:05")+" "+s)
}

func (r *recorder) violations() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.found...)
}

func (r *recorder) slurmErrorCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.slurmErrors
}

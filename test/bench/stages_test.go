package bench

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobset "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
)

// The stages a TrainJob passes on its way to running remote work, in order.
// Each is clocked in this process when a watch first shows it, so a round's
// breakdown says which step paces the whole: the stage whose last job
// arrives much later than the step before's is the bound.
var stageNames = []string{
	"created",   // the TrainJob appeared in a watch on the hub
	"workload",  // Kueue made its Workload
	"quota",     // Kueue reserved quota
	"dispatch",  // the hub wrote the Dispatch
	"remote",    // the remote JobSet appeared on its spoke
	"submitted", // the agent reported it submitted
	"admitted",  // Kueue admitted the Workload (the check is Ready)
	"running",   // the agent reported it running
}

// stages records when each TrainJob reached each stage.
type stages struct {
	mu    sync.Mutex
	first time.Time
	at    map[string]map[string]time.Time // TrainJob UID, stage
	owner map[string]string               // Workload UID to TrainJob UID
}

func newStages() *stages {
	return &stages{at: map[string]map[string]time.Time{}, owner: map[string]string{}}
}

func (s *stages) mark(job, stage string, t time.Time) {
	if job == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first.IsZero() || t.Before(s.first) {
		s.first = t
	}
	m := s.at[job]
	if m == nil {
		m = map[string]time.Time{}
		s.at[job] = m
	}
	if _, ok := m[stage]; !ok {
		m[stage] = t
	}
}

func (s *stages) jobOfWorkload(uid string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.owner[uid]
}

// watch follows the hub's TrainJobs, Workloads and Dispatches and the
// spokes' JobSets until ctx ends.
func (s *stages) watch(ctx context.Context, b *testing.B, fleet *kube.Fleet) {
	hub, err := cache.New(fleet.Hub.Config, cache.Options{Scheme: kube.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	on := func(c cache.Cache, obj client.Object, fn func(any)) {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc: fn, UpdateFunc: func(_, o any) { fn(o) },
		}); err != nil {
			b.Fatal(err)
		}
	}
	on(hub, &trainer.TrainJob{}, func(o any) {
		if tj, ok := o.(*trainer.TrainJob); ok {
			s.mark(string(tj.UID), "created", time.Now())
		}
	})
	on(hub, &kueue.Workload{}, func(o any) {
		wl, ok := o.(*kueue.Workload)
		if !ok {
			return
		}
		now := time.Now()
		for _, ref := range wl.OwnerReferences {
			if ref.Kind == trainer.TrainJobKind {
				s.mu.Lock()
				s.owner[string(wl.UID)] = string(ref.UID)
				s.mu.Unlock()
				s.mark(string(ref.UID), "workload", now)
				if apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved) {
					s.mark(string(ref.UID), "quota", now)
				}
				if apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted) {
					s.mark(string(ref.UID), "admitted", now)
				}
			}
		}
	})
	on(hub, &v1alpha1.Dispatch{}, func(o any) {
		d, ok := o.(*v1alpha1.Dispatch)
		if !ok {
			return
		}
		now := time.Now()
		job := s.jobOfWorkload(string(d.Spec.Workload.UID))
		s.mark(job, "dispatch", now)
		switch d.Status.Phase {
		case v1alpha1.DispatchSubmitted:
			s.mark(job, "submitted", now)
		case v1alpha1.DispatchRunning:
			s.mark(job, "submitted", now)
			s.mark(job, "running", now)
		}
	})
	caches := []cache.Cache{hub}
	for _, spoke := range fleet.Spokes {
		c, err := cache.New(spoke.Config, cache.Options{Scheme: kube.Scheme()})
		if err != nil {
			b.Fatal(err)
		}
		on(c, &jobset.JobSet{}, func(o any) {
			if js, ok := o.(*jobset.JobSet); ok {
				s.mark(js.Labels[v1alpha1.LabelTrainJobUID], "remote", time.Now())
			}
		})
		caches = append(caches, c)
	}
	for _, c := range caches {
		go func() { _ = c.Start(ctx) }()
		if !c.WaitForCacheSync(ctx) {
			b.Fatal("stage watches did not sync")
		}
	}
}

// report is one line: for each stage, the seconds from the first create
// until half and until all of the jobs reached it.
func (s *stages) report() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var parts []string
	for _, stage := range stageNames {
		var offs []float64
		for _, m := range s.at {
			if t, ok := m[stage]; ok {
				offs = append(offs, t.Sub(s.first).Seconds())
			}
		}
		if len(offs) == 0 {
			continue
		}
		sort.Float64s(offs)
		parts = append(parts, fmt.Sprintf("%s %d: p50 %.1f s, all %.1f s", stage, len(offs), offs[len(offs)/2], offs[len(offs)-1]))
	}
	return strings.Join(parts, "; ")
}

// lasts is the seconds from the first create until the last job reached
// each stage: where it jumps is the step that paced the round.
func (s *stages) lasts() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var parts []string
	for _, stage := range stageNames {
		var last time.Time
		for _, m := range s.at {
			if t, ok := m[stage]; ok && t.After(last) {
				last = t
			}
		}
		if !last.IsZero() {
			parts = append(parts, fmt.Sprintf("%s %.1f", stage, last.Sub(s.first).Seconds()))
		}
	}
	return "last job's step at s: " + strings.Join(parts, ", ")
}

// roundNotes is a round's notes cell: the CPU time per job of the fleet's
// parts since cpu started, over jobs, and when the last job passed each step.
func roundNotes(cpu *cpuMeter, jobs int, st *stages) string {
	return "CPU s/job: " + cpu.cell(jobs) + "; " + st.lasts()
}

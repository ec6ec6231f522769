package slurm

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/backends/backendtest"
)

// TestListRemoteLiveJobsOnly: the fence sees the jobs whose processes may
// still run, COMPLETING ones among them (slurmctld is still killing or
// cleaning up their processes), and none of them as finished; ended jobs
// are not listed at all, so the fence has nothing to keep or stop there.
func TestListRemoteLiveJobsOnly(t *testing.T) {
	cases := map[string]struct {
		states []string
		listed bool
	}{
		"pending":                 {states: []string{"PENDING"}, listed: true},
		"running":                 {states: []string{"RUNNING"}, listed: true},
		"completed, completing":   {states: []string{"COMPLETED", "COMPLETING"}, listed: true},
		"cancelled, completing":   {states: []string{"CANCELLED", "COMPLETING"}, listed: true},
		"failed, completing":      {states: []string{"FAILED", "COMPLETING"}, listed: true},
		"requeued, completing":    {states: []string{"COMPLETING", "REQUEUED"}, listed: true},
		"completed":               {states: []string{"COMPLETED"}},
		"cancelled":               {states: []string{"CANCELLED"}},
		"failed":                  {states: []string{"FAILED"}},
		"timeout":                 {states: []string{"TIMEOUT"}},
		"node failure":            {states: []string{"NODE_FAIL"}},
		"preempted, not requeued": {states: []string{"PREEMPTED"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := &fakeSlurmrestd{}
			b, _ := fakeBackend(t, f)
			f.add(7, Comment(dispatch(caseSpec{})), tc.states...)
			works, err := b.ListRemote(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if listed := len(works) == 1; listed != tc.listed || len(works) > 1 {
				t.Fatalf("ListRemote = %+v, want listed %v", works, tc.listed)
			}
			if tc.listed && works[0].Finished {
				t.Errorf("ListRemote = %+v, want it not finished: its processes may still run", works)
			}
		})
	}
}

// TestCancelWaitsForKillWait: a cancelled job is CANCELLED and COMPLETING
// while its processes get KillWait to end; Cancel reports gone only once
// it is no longer completing.
func TestCancelWaitsForKillWait(t *testing.T) {
	f := &fakeSlurmrestd{killWait: true}
	b, clk := fakeBackend(t, f)
	d := dispatch(caseSpec{})
	f.add(7, Comment(d), "RUNNING")
	f.add(8, Comment(d), "COMPLETED", "COMPLETING")
	d.Status.Remote = ref(7, "train")
	clk.Step(time.Second)

	backendtest.CheckCancel(t, b, d, []backendtest.CancelStep{
		{Gone: false}, // cancels 7; 8 is cleaning up
		{Gone: false}, // 7 is completing
		{Do: func() { f.finish(7) }, Gone: false}, // 8 is still completing
		{Do: func() { f.finish(8) }, Gone: true},  // both have ended
		{Gone: true},                              // and it stays so
	})
	if _, _, cancelled := f.counts(); !slices.Equal(cancelled, []int32{7}) {
		t.Errorf("cancelled %v, want [7] (8 was already completing)", cancelled)
	}
}

// TestStopWithinFromKillWait: the stop bound is the Target's KillWait as
// last read, Slurm's default before any read or when unset, and the margin.
func TestStopWithinFromKillWait(t *testing.T) {
	f := &fakeSlurmrestd{}
	b, _ := fakeBackend(t, f)
	tgt := target().SlurmKillWait(120).Obj()
	b.Target = func(context.Context) (*v1alpha1.Target, error) { return tgt.DeepCopy(), nil }
	if got, want := b.StopWithin(), 30*time.Second+backends.StopMargin; got != want {
		t.Errorf("StopWithin before any Target read = %v, want %v", got, want)
	}
	if _, err := b.ListRemote(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := b.StopWithin(), 120*time.Second+backends.StopMargin; got != want {
		t.Errorf("StopWithin with killWaitSeconds 120 = %v, want %v", got, want)
	}
	tgt.Spec.Slurm.KillWaitSeconds = nil
	if _, err := b.ListRemote(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := b.StopWithin(), 30*time.Second+backends.StopMargin; got != want {
		t.Errorf("StopWithin with killWaitSeconds unset = %v, want %v", got, want)
	}
}

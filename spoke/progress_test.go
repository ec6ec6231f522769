package spoke

import (
	"context"
	"slices"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/spoke/statusapi"
)

func progressAt(pct int32, at time.Time) *trainer.TrainerStatus {
	return &trainer.TrainerStatus{ProgressPercentage: ptr.To(pct), LastUpdatedTime: metav1.NewTime(at)}
}

// TestAgentCarriesProgressAtItsPace: the agent writes a job's report into
// its Dispatch's status on the first pass, holds a newer one back for the
// interval (no write), writes it after, and writes the last one at once
// when the work ends; then it keeps nothing of the Dispatch.
func TestAgentCarriesProgressAtItsPace(t *testing.T) {
	ctx := context.Background()
	d := running(ours(dispatch())).Obj()
	d.UID = "uid-d1"
	rec := &hubRecorder{}
	hub := newHub(rec, d.DeepCopy())
	be := newFakeBackend()
	be.put(d, backends.Status{Phase: v1alpha1.DispatchRunning, StartTime: d.Status.StartTime})
	clk := testingclock.NewFakeClock(t0)
	reports := statusapi.NewReports(30 * time.Second)
	r := &DispatchReconciler{Hub: hub, Target: testTarget, Backend: be, Clock: clk, Resync: resync, Progress: reports}
	pass := func() *v1alpha1.Dispatch {
		t.Helper()
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(d)}); err != nil {
			t.Fatalf("reconcile: %v", err)
		}
		var got v1alpha1.Dispatch
		if err := hub.Get(ctx, client.ObjectKeyFromObject(d), &got); err != nil {
			t.Fatal(err)
		}
		return &got
	}
	pct := func(d *v1alpha1.Dispatch) int32 {
		if d.Status.TrainerStatus == nil {
			return -1
		}
		return ptr.Deref(d.Status.TrainerStatus.ProgressPercentage, -1)
	}

	reports.Put(d.UID, progressAt(10, t0))
	if got := pct(pass()); got != 10 {
		t.Fatalf("first report: progress %d, want 10", got)
	}
	writes := rec.statusWrites
	clk.Step(10 * time.Second)
	reports.Put(d.UID, progressAt(20, clk.Now()))
	if got := pct(pass()); got != 10 || rec.statusWrites != writes {
		t.Errorf("within the interval: progress %d after %d writes, want 10 and no write", got, rec.statusWrites-writes)
	}
	clk.Step(20 * time.Second)
	if got := pct(pass()); got != 20 {
		t.Errorf("after the interval: progress %d, want 20", got)
	}
	clk.Step(time.Second)
	reports.Put(d.UID, progressAt(100, clk.Now()))
	be.put(d, backends.Status{Phase: v1alpha1.DispatchSucceeded, StartTime: d.Status.StartTime, CompletionTime: &metav1.Time{Time: clk.Now()}})
	if got := pass(); pct(got) != 100 || got.Status.Phase != v1alpha1.DispatchSucceeded {
		t.Errorf("at the end: progress %d in phase %s, want 100 and Succeeded", pct(got), got.Status.Phase)
	}
	// The history keeps reports a step (30 s) apart by their time: 20 was
	// made 10 s after 10 and is left out; the last one of finished work
	// is kept although it came within a step.
	var history []int32
	if h := pass().Status.ProgressHistory; h != nil {
		for _, p := range h.Points {
			history = append(history, ptr.Deref(p.ProgressPercentage, -1))
		}
	}
	if want := []int32{10, 100}; !slices.Equal(history, want) {
		t.Errorf("history of progress %v, want %v", history, want)
	}
	if reports.Len() != 0 {
		t.Errorf("the agent keeps %d entries of finished work", reports.Len())
	}
}

func TestHistoryPointNeverLaterThanNow(t *testing.T) {
	cases := map[string]struct {
		at, want time.Time
	}{
		"a report of the past keeps its time": {at: t0.Add(-time.Minute), want: t0.Add(-time.Minute)},
		"one from a clock ahead is now":       {at: t0.Add(24 * time.Hour), want: t0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			report := progressAt(10, tc.at)
			if got := historyPoint(report, t0).LastUpdatedTime.Time; !got.Equal(tc.want) {
				t.Errorf("point at %s, want %s", got, tc.want)
			}
			if !report.LastUpdatedTime.Time.Equal(tc.at) {
				t.Errorf("the report was changed")
			}
		})
	}
}

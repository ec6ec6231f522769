package spoke

import (
	"context"
	"testing"

	testingclock "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// TestRunningWorkIsCountedFromTheNextReading: the agent tells the hub from
// which numbered capacity reading a running Dispatch is counted. An agent
// that restarted continues the Target's count and stamps nothing before its
// first reading; a reading that began before the work was seen running
// never claims it; work that runs again is counted afresh.
func TestRunningWorkIsCountedFromTheNextReading(t *testing.T) {
	ctx := context.Background()
	target := tytesting.MakeKubernetesTarget(testTarget, "gpu").Obj()
	target.Status.CapacityReading = 40 // published by the agent's previous run
	d1 := ours(submitted(dispatch())).Obj()
	d2 := ours(submitted(tytesting.MakeDispatch("d2", agentNS, testTarget))).Obj()
	hub := fake.NewClientBuilder().WithScheme(HubScheme()).WithObjects(target, d1, d2).
		WithStatusSubresource(&v1alpha1.Target{}, &v1alpha1.Dispatch{}).Build()
	be := newFakeBackend()
	readings := &CapacityReadings{}
	h := &Heartbeat{Hub: hub, Target: testTarget, Backend: be, Clock: testingclock.NewFakeClock(t0), Readings: readings}
	r := &DispatchReconciler{Hub: hub, Target: testTarget, Backend: be, Clock: testingclock.NewFakeClock(t0), Resync: resync, Readings: readings}

	reading := func() int64 {
		t.Helper()
		var tg v1alpha1.Target
		if err := hub.Get(ctx, client.ObjectKey{Name: testTarget}, &tg); err != nil {
			t.Fatal(err)
		}
		return tg.Status.CapacityReading
	}
	observe := func(d *v1alpha1.Dispatch, phase v1alpha1.DispatchPhase) int64 {
		t.Helper()
		be.put(d, backends.Status{Phase: phase})
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(d)}); err != nil {
			t.Fatal(err)
		}
		var got v1alpha1.Dispatch
		if err := hub.Get(ctx, client.ObjectKeyFromObject(d), &got); err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase != phase {
			t.Fatalf("%s: phase %q, want %q", d.Name, got.Status.Phase, phase)
		}
		return got.Status.CountedFromReading
	}

	if got := observe(d1, v1alpha1.DispatchRunning); got != 0 {
		t.Errorf("seen running before the restarted agent's first reading: counted from %d, want 0 (unknown)", got)
	}
	if err := h.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if got := reading(); got != 41 {
		t.Errorf("first reading after the restart published as %d, want 41 (continuing 40)", got)
	}
	if got := observe(d1, v1alpha1.DispatchRunning); got != 42 {
		t.Errorf("d1 seen running again after reading 41: counted from %d, want 42", got)
	}
	if got := observe(d2, v1alpha1.DispatchRunning); got != 42 {
		t.Errorf("d2 seen running after reading 41: counted from %d, want 42", got)
	}
	if err := h.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if got := reading(); got != 42 {
		t.Errorf("second reading published as %d, want 42", got)
	}
	if got := observe(d2, v1alpha1.DispatchRunning); got != 42 {
		t.Errorf("d2 still running: counted from %d, want 42 kept", got)
	}
	if got := observe(d2, v1alpha1.DispatchSubmitted); got != 0 {
		t.Errorf("d2 requeued by its scheduler: counted from %d, want 0", got)
	}
	if got := observe(d2, v1alpha1.DispatchRunning); got != 43 {
		t.Errorf("d2 running again after reading 42: counted from %d, want 43", got)
	}

	// A reading whose capacity call failed publishes no number: the free
	// counts are still those of reading 42.
	be.capacityErr = context.DeadlineExceeded
	if err := h.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if got := reading(); got != 42 {
		t.Errorf("after a failed capacity call the reading is %d, want 42", got)
	}
}

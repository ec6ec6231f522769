package spoke

import (
	"context"
	"fmt"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// TestFencedAttemptsAreForgottenOnceNoReportIsDue: a replica that fenced
// 1,000 running jobs and never reports them (a standby) forgets each once
// its Dispatch is gone, on another attempt or ended, and keeps only those
// whose report is still due.
func TestFencedAttemptsAreForgottenOnceNoReportIsDue(t *testing.T) {
	ctx := context.Background()
	const jobs, stillDue = 1000, 3
	var objs []client.Object
	var ds []*v1alpha1.Dispatch
	for i := range jobs {
		d := running(tytesting.MakeDispatch(fmt.Sprintf("d%04d", i), agentNS, testTarget).Attempt(1)).Obj()
		ds, objs = append(ds, d), append(objs, d)
	}
	hub := newHub(&hubRecorder{}, objs...)
	clk := testingclock.NewFakeClock(t0)
	be := newFakeBackend()
	for _, d := range ds {
		be.put(d, backends.Status{Phase: v1alpha1.DispatchRunning})
	}
	l := newTestLease(hub, clk, be)
	clk.Step(testFenceAfter)
	watchdog(t, l)
	if got := len(l.fenced); got != jobs {
		t.Fatalf("fenced %d attempts, want %d", got, jobs)
	}

	for i, d := range ds[stillDue:] {
		switch i % 3 {
		case 0: // deleted
			if err := hub.Delete(ctx, d); err != nil {
				t.Fatal(err)
			}
		case 1: // reported by the leader
			d.Status.Phase, d.Status.Reason = v1alpha1.DispatchFailed, v1alpha1.ReasonAgentFenced
			if err := hub.Status().Update(ctx, d); err != nil {
				t.Fatal(err)
			}
		case 2: // requeued by the hub as a new attempt
			d.Spec.Attempt = 2
			if err := hub.Update(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := l.renew(ctx); err != nil {
		t.Fatal(err)
	}
	if !l.check() {
		t.Fatal("lease not held after a renewal")
	}
	l.prune(ctx)
	if got := len(l.fenced); got != stillDue {
		t.Errorf("after the prune %d fenced attempts are remembered, want the %d whose report is due", got, stillDue)
	}
	for _, d := range ds[:stillDue] {
		if !l.Fenced(d) {
			t.Errorf("%s: forgotten while its report is due", d.Name)
		}
	}
}

// TestAgentMemoryAfterManyJobs: Dispatches go through the agent
// (submitted, observed until they succeed, deleted), each pass as the
// watch would queue it, and the agent keeps nothing of them. (100 of them:
// the fake hub's writes cost a millisecond each; the per-job maps below
// the agent are run through with 1,000 jobs in their own packages.)
func TestAgentMemoryAfterManyJobs(t *testing.T) {
	ctx := context.Background()
	hub := newHub(&hubRecorder{})
	clk := testingclock.NewFakeClock(t0)
	be := newFakeBackend()
	r := &DispatchReconciler{Hub: hub, Target: testTarget, Backend: be, Clock: clk, Resync: time.Minute}
	pass := func(d *v1alpha1.Dispatch) {
		t.Helper()
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(d)}); err != nil {
			t.Fatalf("%s: %v", d.Name, err)
		}
	}
	const jobs = 100
	for i := range jobs {
		d := tytesting.MakeDispatch(fmt.Sprintf("d%04d", i), agentNS, testTarget).Attempt(1).Obj()
		if err := hub.Create(ctx, d); err != nil {
			t.Fatal(err)
		}
		pass(d) // finalizer, submit
		pass(d) // the watch event of the agent's own write
		be.put(d, backends.Status{Phase: v1alpha1.DispatchSucceeded})
		pass(d) // the poller's wake-up: final status
		pass(d)
		if err := hub.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
			t.Fatal(err)
		}
		if d.Status.Phase != v1alpha1.DispatchSucceeded {
			t.Fatalf("%s: phase %s, want Succeeded", d.Name, d.Status.Phase)
		}
		if err := hub.Delete(ctx, d); err != nil {
			t.Fatal(err)
		}
		pass(d) // cancel, finalizer off
		pass(d) // gone
	}
	if n := len(r.own.replaced); n != 0 {
		t.Errorf("after %d jobs the agent remembers its own writes of %d Dispatches, want none", jobs, n)
	}
}

package dispatch

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tyt "github.com/trainyard-dev/trainyard/internal/testing"
)

func silentTarget(reason string) *tyt.TargetWrapper {
	return gpuTarget().AvailableCondition(metav1.ConditionFalse, reason)
}

func terminatingTarget(w *tyt.TargetWrapper) *tyt.TargetWrapper {
	w.DeletionTimestamp = &metav1.Time{Time: t0}
	return w
}

// runningOurs is attempt 1 running, with the finalizer its agent put on.
func runningOurs() *tyt.DispatchWrapper {
	return liveOn(v1alpha1.DispatchRunning, v1alpha1.ReasonRemoteRunning, "", true).Finalizers(v1alpha1.RemoteCleanupFinalizer)
}

// TestDeletingOnALostTargetLetsGo: every path that deletes a Dispatch, or
// waits for one being deleted, releases the agent's finalizer when its
// target is lost, so that no next attempt waits for an agent that is gone.
func TestDeletingOnALostTargetLetsGo(t *testing.T) {
	const lost = "target gpu-a lost: set by test"
	runCases(t, map[string]struct {
		h    hubState
		want outcome
	}{
		"a checkless job requeued off a lost target": {
			h:    hubState{admitted: true, dispatch: runningOurs().Obj(), target: silentTarget(v1alpha1.ReasonLeaseExpired)},
			want: outcome{Dispatch: "gone", Finalizer: true, TargetHeld: true, Events: []string{"Warning Requeued " + lost}},
		},
		"a checkless job requeued off a live target waits for the agent": {
			h:    hubState{admitted: true, dispatch: liveOn(v1alpha1.DispatchFailed, v1alpha1.ReasonRemoteFailed, "boom", false).Finalizers(v1alpha1.RemoteCleanupFinalizer).Obj()},
			want: outcome{Dispatch: "deleting", Finalizer: true, TargetHeld: true, Events: []string{"Warning Requeued remote work on target gpu-a (attempt 1) ended Failed before it was accepted: boom"}},
		},
		"the next attempt waits on an earlier one being deleted on a lost target": {
			h:    hubState{check: kueue.CheckStatePending, dispatch: deleting(runningOurs()), target: silentTarget(v1alpha1.ReasonLeaseExpired)},
			want: outcome{Check: kueue.CheckStatePending, CheckMsg: "before", Dispatch: "gone", Finalizer: true, TargetHeld: true},
		},
		"the next attempt waits on an earlier one being deleted on a target set out of service": {
			h:    hubState{check: kueue.CheckStatePending, dispatch: deleting(runningOurs()), target: silentTarget(v1alpha1.ReasonOutOfService)},
			want: outcome{Check: kueue.CheckStatePending, CheckMsg: "before", Dispatch: "gone", Finalizer: true, TargetHeld: true},
		},
		"the next attempt waits on an earlier one whose agent holds its jobs": {
			h:    hubState{check: kueue.CheckStatePending, dispatch: deleting(runningOurs()), target: silentTarget(v1alpha1.ReasonAwaitingAgent)},
			want: outcome{Check: kueue.CheckStatePending, CheckMsg: "before", Dispatch: "deleting", Finalizer: true, TargetHeld: true},
		},
	})
}

// TestWaitingForAnEarlierAttemptDoesNotPoll: a pass that waits for an
// earlier attempt being deleted is woken by its going or its target's
// loss; it looks again after RetryAfter, not every second. Only a lagging
// cache is looked at again within the second.
func TestWaitingForAnEarlierAttemptDoesNotPoll(t *testing.T) {
	cases := map[string]struct {
		dispatch *v1alpha1.Dispatch
		want     time.Duration
	}{
		"being deleted, its agent cancelling":    {dispatch: deleting(runningOurs()), want: DefaultRetryAfter},
		"the cache shows an attempt ahead of it": {dispatch: runningOurs().Attempt(2).Obj(), want: lagRecheck},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c, _ := statusClient(t, hubState{check: kueue.CheckStatePending, dispatch: tc.dispatch}.objects()...)
			r := NewReconciler(c, c, record.NewFakeRecorder(10), clocktesting.NewFakeClock(t0), Options{})
			res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "team-a", Name: "wl"}})
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter != tc.want {
				t.Errorf("looks again after %v, want %v", res.RequeueAfter, tc.want)
			}
		})
	}
}

// TestRefusalOnATargetLostMeanwhile: a target whose agent refused the job
// and was lost before the hub handled the refusal does not keep the
// Dispatch the hub deletes to place the job again.
func TestRefusalOnATargetLostMeanwhile(t *testing.T) {
	ctx := context.Background()
	rejected := liveOn(v1alpha1.DispatchRejected, v1alpha1.ReasonRemoteRejected, "no such partition", false).
		Finalizers(v1alpha1.RemoteCleanupFinalizer).Obj()
	c, _ := statusClient(t, hubState{check: kueue.CheckStatePending, dispatch: rejected}.objects()...)
	r := NewReconciler(c, c, record.NewFakeRecorder(10), clocktesting.NewFakeClock(t0), Options{})
	s, err := r.load(ctx, client.ObjectKey{Namespace: "team-a", Name: "wl"})
	if err != nil || s.live == nil {
		t.Fatalf("load: %v, live %v", err, s.live)
	}
	// The target's lease expires after the pass read the Dispatch.
	var target v1alpha1.Target
	if err := c.Get(ctx, client.ObjectKey{Name: "gpu-a"}, &target); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(target.DeepCopy())
	target.Status = silentTarget(v1alpha1.ReasonLeaseExpired).Status
	if err := c.Status().Patch(ctx, &target, patch); err != nil {
		t.Fatal(err)
	}
	if err := r.refused(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(rejected), &v1alpha1.Dispatch{}); client.IgnoreNotFound(err) != nil || err == nil {
		t.Errorf("the refused Dispatch on a lost target is still there (%v)", err)
	}
}

// TestTargetDeletedWhileItsAgentIsAway: deleting a Target whose agent's
// lease is not fresh is the operator's word that nothing of it runs: its
// jobs are requeued and their Dispatches let go without the agent. A
// Target whose agent still renews is drained by the agent.
func TestTargetDeletedWhileItsAgentIsAway(t *testing.T) {
	away := func(reason string) *tyt.TargetWrapper { return terminatingTarget(silentTarget(reason)) }
	tornDown := outcome{Check: kueue.CheckStateRetry, CheckMsg: "before", Dispatch: "gone", Finalizer: true, TargetHeld: true}
	waits := tornDown
	waits.Dispatch = "deleting"
	tearDown := func(target *tyt.TargetWrapper) hubState {
		return hubState{check: kueue.CheckStateRetry, dispatch: deleting(runningOurs()), target: target}
	}
	const requeueMsg = "target gpu-a is being deleted and its agent's lease is not fresh (AwaitingAgent): set by test"
	runCases(t, map[string]struct {
		h    hubState
		want outcome
	}{
		"lease not renewed":              {h: tearDown(away(v1alpha1.ReasonLeaseNotRenewed)), want: tornDown},
		"lease expired":                  {h: tearDown(away(v1alpha1.ReasonLeaseExpired)), want: tornDown},
		"Hold target awaiting its agent": {h: tearDown(away(v1alpha1.ReasonAwaitingAgent)), want: tornDown},
		"hub disrupted":                  {h: tearDown(away(v1alpha1.ReasonHubDisrupted)), want: tornDown},
		"agent never renewed":            {h: tearDown(away(v1alpha1.ReasonNoHeartbeat)), want: tornDown},
		"agent renews, backend down: it drains": {
			h: tearDown(away(v1alpha1.ReasonBackendError)), want: waits},
		"agent renews: it drains": {h: tearDown(terminatingTarget(gpuTarget())), want: waits},
		"not being deleted, Hold target: waits": {
			h: tearDown(silentTarget(v1alpha1.ReasonAwaitingAgent)), want: waits},
		"a running job is requeued": {
			h: hubState{check: kueue.CheckStateReady, admitted: true, dispatch: runningOurs().Obj(), target: away(v1alpha1.ReasonAwaitingAgent)},
			want: outcome{Check: kueue.CheckStateRetry, CheckMsg: requeueMsg, Finalizer: true, TargetHeld: true,
				Events: []string{"Warning Requeued " + requeueMsg}},
		},
	})
}

// TestDrainerLetsGoWhenTheAgentIsAway: the drainer releases the Dispatches
// being deleted on a Target being deleted whose agent is away, whatever
// became of their Workloads, and then the Target; it leaves a renewing
// agent to cancel their remote work.
func TestDrainerLetsGoWhenTheAgentIsAway(t *testing.T) {
	cases := map[string]struct {
		target       *tyt.TargetWrapper
		wantDispatch bool
		wantTarget   bool
	}{
		"agent away (Hold)":     {target: silentTarget(v1alpha1.ReasonAwaitingAgent)},
		"hub disrupted":         {target: silentTarget(v1alpha1.ReasonHubDisrupted)},
		"lease not yet expired": {target: silentTarget(v1alpha1.ReasonLeaseNotRenewed)},
		"agent renews":          {target: gpuTarget(), wantDispatch: true, wantTarget: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			d := deleting(runningOurs())
			c, _ := statusClient(t, terminatingTarget(tc.target).Obj(), d)
			drainer := &targetDrainer{client: c, live: c}
			for range 2 {
				if _, err := drainer.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "gpu-a"}}); err != nil {
					t.Fatal(err)
				}
			}
			err := c.Get(ctx, client.ObjectKeyFromObject(d), &v1alpha1.Dispatch{})
			if got := client.IgnoreNotFound(err) != nil || err == nil; got != tc.wantDispatch {
				t.Errorf("Dispatch there: %v (%v), want %v", got, err, tc.wantDispatch)
			}
			err = c.Get(ctx, client.ObjectKey{Name: "gpu-a"}, &v1alpha1.Target{})
			if got := client.IgnoreNotFound(err) != nil || err == nil; got != tc.wantTarget {
				t.Errorf("Target there: %v (%v), want %v", got, err, tc.wantTarget)
			}
		})
	}
}

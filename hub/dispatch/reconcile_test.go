package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueuetesting "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/admissioncheck"
	tyt "github.com/trainyard-dev/trainyard/internal/testing"
)

// hubState is one Workload "wl" of TrainJob "train" in team-a, admitted by
// ClusterQueue "cq" with trainyard's check "trainyard", dispatched as
// attempt 1 to Target "gpu-a" (agent namespace "agents").
type hubState struct {
	check     kueue.CheckState // the check's state on the Workload; "" for none
	untouched bool             // the check as Kueue made it: no message
	acDeleted bool             // the AdmissionCheck object is gone
	admitted  bool
	evicted   bool
	dispatch  *v1alpha1.Dispatch // attempt 1's Dispatch; nil for none
	target    *tyt.TargetWrapper // default: gpu-a, available, held by the hub
	noTarget  bool               // gpu-a is gone
}

// outcome is what one pass leaves behind.
type outcome struct {
	Check      kueue.CheckState
	CheckMsg   string
	TrainJob   []string // Complete/Failed conditions as Type=Status/Reason
	Dispatch   string   // kept, deleting or gone
	Others     int      // Dispatches besides attempt 1's: later attempts
	Finalizer  bool     // the Workload keeps trainyard's finalizer
	TargetHeld bool     // the Target exists and keeps TargetFinalizer
	Events     []string
}

func gpuTarget() *tyt.TargetWrapper {
	w := spokeTarget("gpu-a", "h100").AgentNamespace("agents").Available()
	w.Finalizers = []string{TargetFinalizer}
	return w
}

// liveOn is attempt 1's Dispatch with the phase its agent reported; a
// remote reference when remote is set.
func liveOn(phase v1alpha1.DispatchPhase, reason, msg string, remote bool) *tyt.DispatchWrapper {
	w := tyt.MakeDispatch("wl-a1", "agents", "gpu-a").Attempt(1)
	w.Labels = map[string]string{v1alpha1.LabelWorkloadUID: "wl-uid", v1alpha1.LabelTarget: "gpu-a"}
	w.Spec.Workload = v1alpha1.WorkloadReference{Namespace: "team-a", Name: "wl", UID: "wl-uid"}
	if phase != "" {
		w.Phase(phase)
	}
	w.Status.Reason, w.Status.Message = reason, msg
	if remote {
		w.Remote(&v1alpha1.RemoteRef{Kind: "JobSet", Namespace: "jobs", Name: "train-1"})
	}
	return w
}

func createdAt(w *tyt.DispatchWrapper, at time.Time) *v1alpha1.Dispatch {
	d := w.Obj()
	d.CreationTimestamp = metav1.NewTime(at)
	return d
}

func deleting(w *tyt.DispatchWrapper) *v1alpha1.Dispatch {
	return w.Finalizers(v1alpha1.RemoteCleanupFinalizer).DeletionTimestamp(t0).Obj()
}

func (h hubState) objects() []client.Object {
	tj := tyt.MakeTrainJob("train", "team-a").Obj()
	tj.UID = "uid-train"
	wl := kueuetesting.MakeWorkload("wl", "team-a").UID("wl-uid").
		OwnerReference(trainer.GroupVersion.WithKind(trainer.TrainJobKind), "train", "uid-train").
		Finalizers(v1alpha1.WorkloadFinalizer).Annotations(map[string]string{v1alpha1.AnnotationAttempt: "1"}).
		ReserveQuotaAt(kueuetesting.MakeAdmission("cq").PodSets(
			kueuetesting.MakePodSetAssignment("node").Flavor(gpu, "h100").Obj()).Obj(), t0)
	if h.check != "" {
		msg := "before"
		if h.untouched {
			msg = ""
		}
		wl.AdmissionCheck(kueue.AdmissionCheckState{Name: "trainyard", State: h.check, Message: msg,
			LastTransitionTime: metav1.NewTime(t0)})
	}
	if h.admitted {
		wl.AdmittedAt(true, t0)
	}
	if h.evicted {
		wl.EvictedAt(t0)
	}
	target := h.target
	if target == nil {
		target = gpuTarget()
	}
	objs := []client.Object{tj, wl.Obj(), &kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: "cq"}}}
	if !h.noTarget {
		objs = append(objs, target.Obj())
	}
	if !h.acDeleted {
		objs = append(objs, &kueue.AdmissionCheck{ObjectMeta: metav1.ObjectMeta{Name: "trainyard"},
			Spec: kueue.AdmissionCheckSpec{ControllerName: admissioncheck.ControllerName}})
	}
	if h.dispatch != nil {
		objs = append(objs, h.dispatch)
	}
	return objs
}

// reconcileOnce runs one pass of the Workload reconciler over h and reads
// what it left.
func reconcileOnce(t *testing.T, h hubState) outcome {
	t.Helper()
	ctx := context.Background()
	c, _ := statusClient(t, h.objects()...)
	rec := record.NewFakeRecorder(100)
	r := NewReconciler(c, c, rec, clocktesting.NewFakeClock(t0.Add(time.Minute)), Options{})
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "team-a", Name: "wl"}}); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	var got outcome
	var wl kueue.Workload
	if err := c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "wl"}, &wl); err != nil {
		t.Fatal(err)
	}
	for _, s := range wl.Status.AdmissionChecks {
		if s.Name == "trainyard" {
			got.Check, got.CheckMsg = s.State, s.Message
		}
	}
	got.Finalizer = hasFinalizer(&wl)
	var tj trainer.TrainJob
	if err := c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "train"}, &tj); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{trainer.TrainJobComplete, trainer.TrainJobFailed} {
		if cond := apimeta.FindStatusCondition(tj.Status.Conditions, typ); cond != nil {
			got.TrainJob = append(got.TrainJob, typ+"="+string(cond.Status)+"/"+cond.Reason)
		}
	}
	got.Dispatch = "gone"
	var d v1alpha1.Dispatch
	if err := c.Get(ctx, client.ObjectKey{Namespace: "agents", Name: "wl-a1"}, &d); err == nil {
		got.Dispatch = "kept"
		if !d.DeletionTimestamp.IsZero() {
			got.Dispatch = "deleting"
		}
	}
	var all v1alpha1.DispatchList
	if err := c.List(ctx, &all); err != nil {
		t.Fatal(err)
	}
	for _, o := range all.Items {
		if o.Name != "wl-a1" {
			got.Others++
		}
	}
	var target v1alpha1.Target
	if err := c.Get(ctx, client.ObjectKey{Name: "gpu-a"}, &target); err == nil {
		got.TargetHeld = controllerutil.ContainsFinalizer(&target, TargetFinalizer)
	}
	close(rec.Events)
	for e := range rec.Events {
		got.Events = append(got.Events, e)
	}
	return got
}

func runCases(t *testing.T, cases map[string]struct {
	h    hubState
	want outcome
}) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if tc.want.Dispatch == "" {
				tc.want.Dispatch = "kept"
			}
			got := reconcileOnce(t, tc.h)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("after one pass (-want +got):\n%s", diff)
			}
		})
	}
}

// TestOutcomeFromTheDispatchRecord: the check state and the TrainJob's end
// follow from the Dispatch's own record, not from what the hub saw before:
// work the remote accepted and that then failed fails the TrainJob whether
// or not the check was Ready yet.
func TestOutcomeFromTheDispatchRecord(t *testing.T) {
	const where = "target gpu-a (attempt 1)"
	failedTJ := []string{"Failed=True/" + v1alpha1.ReasonRemoteFailed}
	acceptedOnly := liveOn(v1alpha1.DispatchFailed, v1alpha1.ReasonRemoteFailed, "exit 1", false)
	acceptedOnly.Status.Conditions = []metav1.Condition{{Type: v1alpha1.DispatchAccepted, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonRemoteCreated, LastTransitionTime: metav1.NewTime(t0)}}
	runCases(t, map[string]struct {
		h    hubState
		want outcome
	}{
		"waiting for the agent": {
			h:    hubState{check: kueue.CheckStatePending, dispatch: liveOn(v1alpha1.DispatchPending, "", "", false).Obj()},
			want: outcome{Check: kueue.CheckStatePending, CheckMsg: "dispatched to " + where + ", waiting for its agent", Finalizer: true, TargetHeld: true},
		},
		"waiting for the agent for less than a retry, the check as Kueue made it: left to the agent's answer": {
			h:    hubState{check: kueue.CheckStatePending, untouched: true, dispatch: createdAt(liveOn(v1alpha1.DispatchPending, "", "", false), t0.Add(time.Minute-time.Second))},
			want: outcome{Check: kueue.CheckStatePending, Finalizer: true, TargetHeld: true},
		},
		"waiting for the agent for a retry, the check as Kueue made it": {
			h:    hubState{check: kueue.CheckStatePending, untouched: true, dispatch: createdAt(liveOn(v1alpha1.DispatchPending, "", "", false), t0.Add(time.Minute-DefaultRetryAfter))},
			want: outcome{Check: kueue.CheckStatePending, CheckMsg: "dispatched to " + where + ", waiting for its agent", Finalizer: true, TargetHeld: true},
		},
		"waiting for the agent for less than a retry, the check says something else: left to the agent's answer too": {
			h:    hubState{check: kueue.CheckStatePending, dispatch: createdAt(liveOn(v1alpha1.DispatchPending, "", "", false), t0.Add(time.Minute-time.Second))},
			want: outcome{Check: kueue.CheckStatePending, CheckMsg: "before", Finalizer: true, TargetHeld: true},
		},
		"sent to wait in the target's queue, waiting for the agent for a retry": {
			h: hubState{check: kueue.CheckStatePending, dispatch: createdAt(liveOn(v1alpha1.DispatchPending, "", "", false).
				Annotation(v1alpha1.AnnotationQueued, "true"), t0.Add(time.Minute-DefaultRetryAfter))},
			want: outcome{Check: kueue.CheckStatePending, CheckMsg: "dispatched to " + where + " to wait in its own queue (no target had room), waiting for its agent",
				Finalizer: true, TargetHeld: true},
		},
		"running: Ready": {
			h:    hubState{check: kueue.CheckStatePending, dispatch: liveOn(v1alpha1.DispatchRunning, v1alpha1.ReasonRemoteRunning, "", true).Obj()},
			want: outcome{Check: kueue.CheckStateReady, CheckMsg: "running on " + where + " as JobSet jobs/train-1", Finalizer: true, TargetHeld: true},
		},
		"failed after the hub saw Ready: the TrainJob fails": {
			h: hubState{check: kueue.CheckStateReady, admitted: true,
				dispatch: liveOn(v1alpha1.DispatchFailed, v1alpha1.ReasonRemoteFailed, "exit 1", true).Obj()},
			want: outcome{Check: kueue.CheckStateReady, CheckMsg: "remote work on " + where + " ended Failed", TrainJob: failedTJ, Finalizer: true, TargetHeld: true},
		},
		"failed before the hub saw Ready: the TrainJob fails all the same": {
			h:    hubState{check: kueue.CheckStatePending, dispatch: liveOn(v1alpha1.DispatchFailed, v1alpha1.ReasonRemoteFailed, "exit 1", true).Obj()},
			want: outcome{Check: kueue.CheckStateReady, CheckMsg: "remote work on " + where + " ended Failed", TrainJob: failedTJ, Finalizer: true, TargetHeld: true},
		},
		"accepted by its condition alone": {
			h:    hubState{check: kueue.CheckStatePending, dispatch: acceptedOnly.Obj()},
			want: outcome{Check: kueue.CheckStateReady, CheckMsg: "remote work on " + where + " ended Failed", TrainJob: failedTJ, Finalizer: true, TargetHeld: true},
		},
		"cancelled on the remote before Ready": {
			h: hubState{check: kueue.CheckStatePending, dispatch: liveOn(v1alpha1.DispatchCancelled, v1alpha1.ReasonRemoteCancelled, "scancel", true).Obj()},
			want: outcome{Check: kueue.CheckStateReady, CheckMsg: "remote work on " + where + " ended Cancelled",
				TrainJob: []string{"Failed=True/" + v1alpha1.ReasonRemoteCancelled}, Finalizer: true, TargetHeld: true},
		},
		"failed with no record of remote work: requeued": {
			h: hubState{check: kueue.CheckStatePending, dispatch: liveOn(v1alpha1.DispatchFailed, v1alpha1.ReasonRemoteFailed, "boom", false).Obj()},
			want: outcome{Check: kueue.CheckStateRetry, CheckMsg: "remote work on " + where + " ended Failed before it was accepted: boom", Finalizer: true, TargetHeld: true,
				Events: []string{"Warning Requeued remote work on " + where + " ended Failed before it was accepted: boom"}},
		},
		"succeeded before the hub saw Ready": {
			h: hubState{check: kueue.CheckStatePending, dispatch: liveOn(v1alpha1.DispatchSucceeded, v1alpha1.ReasonRemoteSucceeded, "", true).Obj()},
			want: outcome{Check: kueue.CheckStateReady, CheckMsg: "running on " + where + " as JobSet jobs/train-1",
				TrainJob: []string{"Complete=True/" + v1alpha1.ReasonRemoteSucceeded}, Finalizer: true, TargetHeld: true},
		},
		"refused by the target: placed again": {
			h: hubState{check: kueue.CheckStatePending, dispatch: liveOn(v1alpha1.DispatchRejected, v1alpha1.ReasonRemoteRejected, "no such partition", false).Obj()},
			want: outcome{Check: kueue.CheckStatePending, CheckMsg: where + " refused the job: no such partition; placing it again", Dispatch: "gone", Finalizer: true, TargetHeld: true,
				Events: []string{"Warning TargetRefused " + where + " refused the job: no such partition"}},
		},
	})
}

// TestWorkWithoutItsCheckOrDispatch: a Dispatch deleted under a Ready
// check requeues the job; a check that is gone (its AdmissionCheck deleted
// or taken off the ClusterQueue) tears down nothing that runs.
func TestWorkWithoutItsCheckOrDispatch(t *testing.T) {
	running := func() *tyt.DispatchWrapper {
		return liveOn(v1alpha1.DispatchRunning, v1alpha1.ReasonRemoteRunning, "", true)
	}
	const deletedMsg = "the Dispatch of attempt 1 was deleted while the job ran"
	runCases(t, map[string]struct {
		h    hubState
		want outcome
	}{
		"Dispatch deleted under Ready: requeued": {
			h: hubState{check: kueue.CheckStateReady, admitted: true},
			want: outcome{Check: kueue.CheckStateRetry, CheckMsg: deletedMsg, Dispatch: "gone", Finalizer: true, TargetHeld: true,
				Events: []string{"Warning Requeued " + deletedMsg}},
		},
		"an earlier attempt still being deleted: no next attempt beside it": {
			h:    hubState{check: kueue.CheckStatePending, dispatch: deleting(running())},
			want: outcome{Check: kueue.CheckStatePending, CheckMsg: "before", Dispatch: "deleting", Finalizer: true, TargetHeld: true},
		},
		"Dispatch being deleted under Ready: requeued": {
			h: hubState{check: kueue.CheckStateReady, admitted: true, dispatch: deleting(running())},
			want: outcome{Check: kueue.CheckStateRetry, CheckMsg: deletedMsg, Dispatch: "deleting", Finalizer: true, TargetHeld: true,
				Events: []string{"Warning Requeued " + deletedMsg}},
		},
		"AdmissionCheck object deleted while the job runs: it runs on": {
			h:    hubState{check: kueue.CheckStateReady, acDeleted: true, admitted: true, dispatch: running().Obj()},
			want: outcome{Check: kueue.CheckStateReady, CheckMsg: "before", Finalizer: true, TargetHeld: true},
		},
		"check taken off the ClusterQueue while the job runs: it runs on": {
			h:    hubState{admitted: true, dispatch: running().Obj()},
			want: outcome{Finalizer: true, TargetHeld: true},
		},
		"check gone and the job fails: the TrainJob fails": {
			h: hubState{acDeleted: true, check: kueue.CheckStateReady, admitted: true,
				dispatch: liveOn(v1alpha1.DispatchFailed, v1alpha1.ReasonRemoteFailed, "exit 1", true).Obj()},
			want: outcome{Check: kueue.CheckStateReady, CheckMsg: "before", TrainJob: []string{"Failed=True/" + v1alpha1.ReasonRemoteFailed}, Finalizer: true, TargetHeld: true},
		},
		"check gone and the Workload evicted: torn down": {
			h:    hubState{acDeleted: true, check: kueue.CheckStateReady, evicted: true, dispatch: running().Obj()},
			want: outcome{Check: kueue.CheckStateReady, CheckMsg: "before", Dispatch: "gone", Finalizer: true, TargetHeld: true},
		},
		"check gone before admission, nothing dispatched: the Workload is let go": {
			h:    hubState{},
			want: outcome{Dispatch: "gone", TargetHeld: true},
		},
	})
}

// TestTargetBeingDeleted: jobs on a Target being deleted are requeued, and
// their Dispatches wait for the agent (which still reads its Target); only
// a Dispatch whose Target is already gone is let go at once.
func TestTargetBeingDeleted(t *testing.T) {
	terminating := func() *tyt.TargetWrapper {
		w := gpuTarget()
		w.DeletionTimestamp = &metav1.Time{Time: t0}
		return w
	}
	running := func() *tyt.DispatchWrapper {
		return liveOn(v1alpha1.DispatchRunning, v1alpha1.ReasonRemoteRunning, "", true)
	}
	runCases(t, map[string]struct {
		h    hubState
		want outcome
	}{
		"a running job is requeued": {
			h: hubState{check: kueue.CheckStateReady, admitted: true, dispatch: running().Obj(), target: terminating()},
			want: outcome{Check: kueue.CheckStateRetry, CheckMsg: "target gpu-a is being deleted", Finalizer: true, TargetHeld: true,
				Events: []string{"Warning Requeued target gpu-a is being deleted"}},
		},
		"tear-down waits for the agent to cancel": {
			h:    hubState{check: kueue.CheckStateRetry, dispatch: deleting(running()), target: terminating()},
			want: outcome{Check: kueue.CheckStateRetry, CheckMsg: "before", Dispatch: "deleting", Finalizer: true, TargetHeld: true},
		},
		"tear-down of a Dispatch whose Target is gone does not wait": {
			h:    hubState{check: kueue.CheckStateRetry, dispatch: deleting(running()), noTarget: true},
			want: outcome{Check: kueue.CheckStateRetry, CheckMsg: "before", Dispatch: "gone", Finalizer: true},
		},
	})
}

// TestSilentTarget: what the hub does with a running job whose target's
// agent went silent follows the target's verdict: requeued once the lease
// expired or an operator set it out of service, kept while the hub is
// disrupted or the target holds its jobs for the agent.
func TestSilentTarget(t *testing.T) {
	running := func() *v1alpha1.Dispatch {
		return liveOn(v1alpha1.DispatchRunning, v1alpha1.ReasonRemoteRunning, "", true).Obj()
	}
	silent := func(reason string) *tyt.TargetWrapper {
		return gpuTarget().AvailableCondition(metav1.ConditionFalse, reason)
	}
	kept := outcome{Check: kueue.CheckStateReady, CheckMsg: "running on target gpu-a (attempt 1) as JobSet jobs/train-1", Finalizer: true, TargetHeld: true}
	const lost = "target gpu-a lost: set by test"
	requeued := outcome{Check: kueue.CheckStateRetry, CheckMsg: lost, Finalizer: true, TargetHeld: true, Events: []string{"Warning Requeued " + lost}}
	runCases(t, map[string]struct {
		h    hubState
		want outcome
	}{
		"lease not yet past the grace: kept": {
			h: hubState{check: kueue.CheckStateReady, admitted: true, dispatch: running(), target: silent(v1alpha1.ReasonLeaseNotRenewed)}, want: kept},
		"hub disrupted: kept": {
			h: hubState{check: kueue.CheckStateReady, admitted: true, dispatch: running(), target: silent(v1alpha1.ReasonHubDisrupted)}, want: kept},
		"Hold target awaiting its agent: kept": {
			h: hubState{check: kueue.CheckStateReady, admitted: true, dispatch: running(), target: silent(v1alpha1.ReasonAwaitingAgent)}, want: kept},
		"lease expired: requeued": {
			h:    hubState{check: kueue.CheckStateReady, admitted: true, dispatch: running(), target: silent(v1alpha1.ReasonLeaseExpired)},
			want: requeued},
		"out of service: requeued": {
			h:    hubState{check: kueue.CheckStateReady, admitted: true, dispatch: running(), target: silent(v1alpha1.ReasonOutOfService)},
			want: requeued},
	})
}

// TestTargetDrainer: the hub holds a Target while Dispatches name it and
// lets a Target being deleted go once none is left.
func TestTargetDrainer(t *testing.T) {
	cases := map[string]struct {
		held, deleting bool
		dispatch       *v1alpha1.Dispatch
		wantHeld       bool
		wantGone       bool
		wantRequeue    bool
	}{
		"being deleted with a Dispatch: held":              {held: true, deleting: true, dispatch: liveOn(v1alpha1.DispatchRunning, "", "", true).Obj(), wantHeld: true, wantRequeue: true},
		"being deleted, a Dispatch still cancelling: held": {held: true, deleting: true, dispatch: deleting(liveOn(v1alpha1.DispatchRunning, "", "", true)), wantHeld: true, wantRequeue: true},
		"being deleted and drained: released":              {held: true, deleting: true, wantGone: true},
		"Dispatches from before the finalizer: held":       {dispatch: liveOn(v1alpha1.DispatchRunning, "", "", true).Obj(), wantHeld: true},
		"no Dispatch: left alone":                          {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			w := spokeTarget("gpu-a", "h100").AgentNamespace("agents")
			if tc.held {
				w.Finalizers = []string{TargetFinalizer}
			}
			if tc.deleting {
				w.DeletionTimestamp = &metav1.Time{Time: t0}
			}
			objs := []client.Object{w.Obj()}
			if tc.dispatch != nil {
				objs = append(objs, tc.dispatch)
			}
			c, _ := statusClient(t, objs...)
			d := &targetDrainer{client: c, live: c}
			res, err := d.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "gpu-a"}})
			if err != nil {
				t.Fatalf("reconcile: %v", err)
			}
			var got v1alpha1.Target
			err = c.Get(ctx, client.ObjectKey{Name: "gpu-a"}, &got)
			if gone := client.IgnoreNotFound(err) == nil && err != nil; gone != tc.wantGone {
				t.Errorf("target gone = %v (%v), want %v", gone, err, tc.wantGone)
			}
			if held := err == nil && controllerutil.ContainsFinalizer(&got, TargetFinalizer); held != tc.wantHeld {
				t.Errorf("held = %v, want %v", held, tc.wantHeld)
			}
			if (res.RequeueAfter > 0) != tc.wantRequeue {
				t.Errorf("requeue after %v, want a requeue: %v", res.RequeueAfter, tc.wantRequeue)
			}
		})
	}
}

// TestFinishedWorkOnALostTarget: a target whose lease expired after its job
// ended never runs that job again: the job's own outcome stands. Work the
// agent stopped for want of a lease, and work still running, is requeued.
func TestFinishedWorkOnALostTarget(t *testing.T) {
	const where = "target gpu-a (attempt 1)"
	lost := func() *tyt.TargetWrapper {
		return gpuTarget().AvailableCondition(metav1.ConditionFalse, v1alpha1.ReasonLeaseExpired)
	}
	requeued := "target gpu-a lost: set by test"
	runCases(t, map[string]struct {
		h    hubState
		want outcome
	}{
		"succeeded: completes, not requeued": {
			h: hubState{check: kueue.CheckStateReady, admitted: true, target: lost(),
				dispatch: liveOn(v1alpha1.DispatchSucceeded, v1alpha1.ReasonRemoteSucceeded, "", true).Obj()},
			want: outcome{Check: kueue.CheckStateReady, CheckMsg: "running on " + where + " as JobSet jobs/train-1",
				TrainJob: []string{"Complete=True/" + v1alpha1.ReasonRemoteSucceeded}, Finalizer: true, TargetHeld: true},
		},
		"failed: fails, not requeued": {
			h: hubState{check: kueue.CheckStateReady, admitted: true, target: lost(),
				dispatch: liveOn(v1alpha1.DispatchFailed, v1alpha1.ReasonRemoteFailed, "exit 1", true).Obj()},
			want: outcome{Check: kueue.CheckStateReady, CheckMsg: "remote work on " + where + " ended Failed",
				TrainJob: []string{"Failed=True/" + v1alpha1.ReasonRemoteFailed}, Finalizer: true, TargetHeld: true},
		},
		"running: requeued": {
			h: hubState{check: kueue.CheckStateReady, admitted: true, target: lost(),
				dispatch: liveOn(v1alpha1.DispatchRunning, v1alpha1.ReasonRemoteRunning, "", true).Obj()},
			want: outcome{Check: kueue.CheckStateRetry, CheckMsg: requeued, Finalizer: true, TargetHeld: true,
				Events: []string{"Warning Requeued " + requeued}},
		},
		"stopped by its agent: requeued": {
			h: hubState{check: kueue.CheckStateReady, admitted: true,
				dispatch: liveOn(v1alpha1.DispatchFailed, v1alpha1.ReasonAgentFenced, "stopped", true).Obj()},
			want: outcome{Check: kueue.CheckStateRetry, CheckMsg: "target gpu-a lost its lease and stopped attempt 1", Finalizer: true, TargetHeld: true,
				Events: []string{"Warning Requeued target gpu-a lost its lease and stopped attempt 1"}},
		},
	})
}

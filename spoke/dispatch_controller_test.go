package spoke

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

const (
	testTarget = "gpu-a"
	agentNS    = "trainyard-gpu-a"
	resync     = time.Minute
)

// t0 is the fake clock's start; whole seconds, as metav1.Time stores them.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) *metav1.Time { return &metav1.Time{Time: t0.Add(d)} }

func dispatch() *tytesting.DispatchWrapper { return tytesting.MakeDispatch("d1", agentNS, testTarget) }

func ours(w *tytesting.DispatchWrapper) *tytesting.DispatchWrapper {
	return w.Finalizers(v1alpha1.RemoteCleanupFinalizer)
}

// conds are the three Dispatch conditions, all with reason and msg, as
// setPhase writes them.
func conds(reason, msg string, accepted, running, finished metav1.ConditionStatus) []metav1.Condition {
	c := func(t string, s metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg}
	}
	return []metav1.Condition{
		c(v1alpha1.DispatchAccepted, accepted), c(v1alpha1.DispatchRunningCondition, running), c(v1alpha1.DispatchFinished, finished),
	}
}

const (
	yes = metav1.ConditionTrue
	no  = metav1.ConditionFalse
)

// submitted is d as the agent left it after creating its remote work an
// hour before t0.
func submitted(w *tytesting.DispatchWrapper) *tytesting.DispatchWrapper {
	d := w.Obj()
	ref := fakeRef(d)
	d.Status = v1alpha1.DispatchStatus{
		Phase: v1alpha1.DispatchSubmitted, Reason: v1alpha1.ReasonRemoteCreated, Message: "remote work created",
		Remote: &ref, ObservedAttempt: d.Spec.Attempt,
		Conditions: conds(v1alpha1.ReasonRemoteCreated, "remote work created", yes, no, no),
	}
	for i := range d.Status.Conditions {
		d.Status.Conditions[i].LastTransitionTime = *at(-time.Hour)
	}
	return w
}

// running is d running since half an hour before t0.
func running(w *tytesting.DispatchWrapper) *tytesting.DispatchWrapper {
	d := submitted(w).Obj()
	d.Status.Phase, d.Status.Reason, d.Status.Message = v1alpha1.DispatchRunning, v1alpha1.ReasonRemoteRunning, ""
	d.Status.Conditions = conds(v1alpha1.ReasonRemoteRunning, "", yes, yes, no)
	for i := range d.Status.Conditions {
		d.Status.Conditions[i].LastTransitionTime = *at(-30 * time.Minute)
	}
	d.Status.StartTime = at(-30 * time.Minute)
	return w
}

func withStatus(w *tytesting.DispatchWrapper, mutate func(*v1alpha1.DispatchStatus)) *tytesting.DispatchWrapper {
	mutate(&w.Status)
	return w
}

// hubRecorder counts the status writes the agent makes and fails the first
// failWrites of them.
type hubRecorder struct {
	statusWrites, failWrites int
}

func newHub(rec *hubRecorder, objs ...client.Object) client.Client {
	return fake.NewClientBuilder().WithScheme(HubScheme()).WithObjects(objs...).
		WithStatusSubresource(&v1alpha1.Dispatch{}).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				rec.statusWrites++
				if rec.statusWrites <= rec.failWrites {
					return apierrors.NewServiceUnavailable("hub is restarting")
				}
				return c.SubResource(sub).Update(ctx, obj, opts...)
			},
		}).Build()
}

type reconcileCase struct {
	// dispatch is stored on the hub before the first pass; nil stores none.
	dispatch *tytesting.DispatchWrapper
	// prepare sets up the backend; it gets the stored Dispatch.
	prepare func(*fakeBackend, *v1alpha1.Dispatch)
	// passes is how many reconciles run (default 1); the clock moves a
	// minute after each.
	passes     int
	failWrites int

	wantResult ctrl.Result // of the last pass
	wantErr    bool        // of the last pass
	// want holds the expected finalizers and status; nil: the Dispatch is gone.
	want         *tytesting.DispatchWrapper
	wantCalls    fakeCalls
	wantWrites   int
	wantRemote   []string
	skipRemote   bool // do not check wantRemote
	checkLTT     bool // compare condition transition times too
	reconcileFor string
}

// dispatchView is what a case compares.
type dispatchView struct {
	Finalizers []string
	Status     v1alpha1.DispatchStatus
}

func viewOf(d *v1alpha1.Dispatch) *dispatchView {
	if d == nil {
		return nil
	}
	return &dispatchView{Finalizers: d.Finalizers, Status: d.Status}
}

func runReconcile(t *testing.T, cases map[string]reconcileCase) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			rec := &hubRecorder{failWrites: tc.failWrites}
			var objs []client.Object
			key := client.ObjectKey{Namespace: agentNS, Name: "d1"}
			if tc.dispatch != nil {
				d := tc.dispatch.Clone().Obj()
				key = client.ObjectKeyFromObject(d)
				objs = append(objs, d)
			}
			hub := newHub(rec, objs...)
			be := newFakeBackend()
			if tc.prepare != nil {
				var d *v1alpha1.Dispatch
				if tc.dispatch != nil {
					d = tc.dispatch.Clone().Obj()
				}
				tc.prepare(be, d)
			}
			clk := testingclock.NewFakeClock(t0)
			r := &DispatchReconciler{Hub: hub, Target: testTarget, Backend: be, Clock: clk, Resync: resync}
			passes := max(tc.passes, 1)
			var res ctrl.Result
			var err error
			for i := range passes {
				res, err = r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
				if err != nil && i < passes-1 {
					t.Logf("pass %d: %v", i+1, err)
				}
				clk.Step(time.Minute)
			}
			if (err != nil) != tc.wantErr {
				t.Fatalf("Reconcile error = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.wantResult, res); diff != "" {
				t.Errorf("Reconcile result (-want +got):\n%s", diff)
			}

			var got *v1alpha1.Dispatch
			var stored v1alpha1.Dispatch
			switch err := hub.Get(ctx, key, &stored); {
			case apierrors.IsNotFound(err):
			case err != nil:
				t.Fatal(err)
			default:
				got = &stored
			}
			var want *v1alpha1.Dispatch
			if tc.want != nil {
				want = tc.want.Obj()
			}
			opts := []cmp.Option{cmpopts.EquateEmpty()}
			if !tc.checkLTT {
				opts = append(opts, cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime"))
			}
			if diff := cmp.Diff(viewOf(want), viewOf(got), opts...); diff != "" {
				t.Errorf("Dispatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantCalls, be.calls, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("backend calls (-want +got):\n%s", diff)
			}
			if rec.statusWrites != tc.wantWrites {
				t.Errorf("status writes = %d, want %d", rec.statusWrites, tc.wantWrites)
			}
			if !tc.skipRemote {
				if diff := cmp.Diff(tc.wantRemote, be.remoteNames(), cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("remote work (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func remoteOf(w *tytesting.DispatchWrapper) []string { return []string{backends.RemoteName(w.Obj())} }

func TestReconcileSubmit(t *testing.T) {
	fresh := dispatch()
	created := conds(v1alpha1.ReasonRemoteCreated, "remote work created", yes, no, no)
	rejectErr := fmt.Errorf("partition gpu: %w", backends.ErrRejected)
	runReconcile(t, map[string]reconcileCase{
		"the first pass adds the finalizer and submits once": {
			dispatch:   fresh,
			wantResult: ctrl.Result{RequeueAfter: resync},
			want: ours(withStatus(dispatch(), func(s *v1alpha1.DispatchStatus) {
				ref := fakeRef(fresh.Obj())
				*s = v1alpha1.DispatchStatus{Phase: v1alpha1.DispatchSubmitted, Reason: v1alpha1.ReasonRemoteCreated,
					Message: "remote work created", Remote: &ref, Conditions: created, ObservedAttempt: 1}
			})),
			wantCalls:  fakeCalls{Submit: 1, Create: 1, Observe: 1},
			wantWrites: 1,
			wantRemote: remoteOf(fresh),
		},
		"later passes observe without submitting again": {
			dispatch:   fresh,
			passes:     3,
			wantResult: ctrl.Result{RequeueAfter: resync},
			want:       ours(submitted(dispatch())),
			wantCalls:  fakeCalls{Submit: 1, Create: 1, Observe: 3},
			wantWrites: 1,
			wantRemote: remoteOf(fresh),
		},
		"the status records the attempt": {
			dispatch:   dispatch().Attempt(3),
			wantResult: ctrl.Result{RequeueAfter: resync},
			want:       ours(submitted(dispatch().Attempt(3))),
			wantCalls:  fakeCalls{Submit: 1, Create: 1, Observe: 1},
			wantWrites: 1,
			wantRemote: remoteOf(dispatch().Attempt(3)),
		},
		"a rejection is final": {
			dispatch: fresh,
			prepare:  func(b *fakeBackend, _ *v1alpha1.Dispatch) { b.submitErr = rejectErr },
			passes:   2,
			want: ours(withStatus(dispatch(), func(s *v1alpha1.DispatchStatus) {
				*s = v1alpha1.DispatchStatus{Phase: v1alpha1.DispatchRejected, Reason: v1alpha1.ReasonRemoteRejected,
					Message: rejectErr.Error(), CompletionTime: at(0), ObservedAttempt: 1,
					Conditions: conds(v1alpha1.ReasonRemoteRejected, rejectErr.Error(), no, no, yes)}
			})),
			wantCalls:  fakeCalls{Submit: 1},
			wantWrites: 1,
		},
		"a transient submit error is retried": {
			dispatch:   fresh,
			prepare:    func(b *fakeBackend, _ *v1alpha1.Dispatch) { b.submitErr = errors.New("connection refused") },
			passes:     2,
			wantErr:    true, // controller-runtime retries with backoff
			want:       ours(failingSince(dispatch(), 2, 0, "connection refused")),
			wantCalls:  fakeCalls{Submit: 2},
			wantWrites: 2, // each failure is counted (submit_failures.go)
		},
		"a transient error keeps an earlier phase": {
			dispatch:   withStatus(dispatch(), func(s *v1alpha1.DispatchStatus) { s.Phase = v1alpha1.DispatchPending }),
			prepare:    func(b *fakeBackend, _ *v1alpha1.Dispatch) { b.submitErr = errors.New("timeout") },
			wantErr:    true,
			want:       ours(failingSince(dispatch(), 1, 0, "timeout").Phase(v1alpha1.DispatchPending)),
			wantCalls:  fakeCalls{Submit: 1},
			wantWrites: 1,
		},
		"not found just after submit is not a missing remote": {
			// The backend's cache has not seen the work it just made.
			dispatch:   fresh,
			prepare:    func(b *fakeBackend, _ *v1alpha1.Dispatch) { b.observeErr = backends.ErrNotFound },
			wantResult: ctrl.Result{RequeueAfter: resync},
			want:       ours(submitted(dispatch())),
			wantCalls:  fakeCalls{Submit: 1, Create: 1, Observe: 1},
			wantWrites: 1,
			wantRemote: remoteOf(fresh),
		},
	})
}

func TestReconcileObserve(t *testing.T) {
	d := dispatch()
	put := func(st backends.Status) func(*fakeBackend, *v1alpha1.Dispatch) {
		return func(b *fakeBackend, d *v1alpha1.Dispatch) { b.put(d, st) }
	}
	replicas := []v1alpha1.ReplicaStatus{{Name: "node", Active: 2, Ready: 2}}
	runReconcile(t, map[string]reconcileCase{
		"running starts now when the backend has no start time": {
			dispatch:   ours(submitted(dispatch())),
			prepare:    put(backends.Status{Phase: v1alpha1.DispatchRunning, Replicas: replicas}),
			wantResult: ctrl.Result{RequeueAfter: resync},
			want: withStatus(ours(submitted(dispatch())).Phase(v1alpha1.DispatchRunning), func(s *v1alpha1.DispatchStatus) {
				s.Reason, s.Message, s.StartTime, s.Replicas = v1alpha1.ReasonRemoteRunning, "", at(0), replicas
				s.Conditions = conds(v1alpha1.ReasonRemoteRunning, "", yes, yes, no)
				s.Conditions[0].LastTransitionTime = *at(-time.Hour) // Accepted did not change
				s.Conditions[1].LastTransitionTime = *at(0)
				s.Conditions[2].LastTransitionTime = *at(-time.Hour)
			}),
			wantCalls:  fakeCalls{Observe: 1},
			wantWrites: 1,
			wantRemote: remoteOf(d),
			checkLTT:   true,
		},
		"running keeps the backend's start time": {
			dispatch:   ours(submitted(dispatch())),
			prepare:    put(backends.Status{Phase: v1alpha1.DispatchRunning, StartTime: at(-20 * time.Second)}),
			wantResult: ctrl.Result{RequeueAfter: resync},
			want: withStatus(ours(running(dispatch())), func(s *v1alpha1.DispatchStatus) {
				s.StartTime = at(-20 * time.Second)
			}),
			wantCalls:  fakeCalls{Observe: 1},
			wantWrites: 1,
			wantRemote: remoteOf(d),
		},
		"an unchanged status is not written": {
			dispatch:   ours(running(dispatch())),
			prepare:    put(backends.Status{Phase: v1alpha1.DispatchRunning}),
			passes:     2,
			wantResult: ctrl.Result{RequeueAfter: resync},
			want:       ours(running(dispatch())),
			wantCalls:  fakeCalls{Observe: 2},
			wantRemote: remoteOf(d),
			checkLTT:   true,
		},
		"success is final and takes the backend's completion time": {
			dispatch: ours(running(dispatch())),
			prepare: put(backends.Status{Phase: v1alpha1.DispatchSucceeded, CompletionTime: at(-5 * time.Second),
				Replicas: []v1alpha1.ReplicaStatus{{Name: "node", Succeeded: 2}}}),
			passes: 2,
			want: withStatus(ours(running(dispatch())), func(s *v1alpha1.DispatchStatus) {
				s.Phase, s.Reason, s.CompletionTime = v1alpha1.DispatchSucceeded, v1alpha1.ReasonRemoteSucceeded, at(-5*time.Second)
				s.Replicas = []v1alpha1.ReplicaStatus{{Name: "node", Succeeded: 2}}
				s.Conditions = conds(v1alpha1.ReasonRemoteSucceeded, "", yes, no, yes)
			}),
			wantCalls:  fakeCalls{Observe: 1},
			wantWrites: 1,
			wantRemote: remoteOf(d),
		},
		"success without a completion time completes now": {
			dispatch: ours(running(dispatch())),
			prepare:  put(backends.Status{Phase: v1alpha1.DispatchSucceeded}),
			want: withStatus(ours(running(dispatch())), func(s *v1alpha1.DispatchStatus) {
				s.Phase, s.Reason, s.CompletionTime = v1alpha1.DispatchSucceeded, v1alpha1.ReasonRemoteSucceeded, at(0)
				s.Conditions = conds(v1alpha1.ReasonRemoteSucceeded, "", yes, no, yes)
			}),
			wantCalls:  fakeCalls{Observe: 1},
			wantWrites: 1,
			wantRemote: remoteOf(d),
		},
		"failure keeps the backend's reason, message and exit code": {
			dispatch: ours(running(dispatch())),
			prepare: put(backends.Status{Phase: v1alpha1.DispatchFailed, Reason: "BackoffLimitExceeded",
				Message: "node-0 exited 3", ExitCode: ptr.To[int32](3)}),
			want: withStatus(ours(running(dispatch())), func(s *v1alpha1.DispatchStatus) {
				s.Phase, s.Reason, s.Message = v1alpha1.DispatchFailed, "BackoffLimitExceeded", "node-0 exited 3"
				s.ExitCode, s.CompletionTime = ptr.To[int32](3), at(0)
				s.Conditions = conds("BackoffLimitExceeded", "node-0 exited 3", yes, no, yes)
			}),
			wantCalls:  fakeCalls{Observe: 1},
			wantWrites: 1,
			wantRemote: remoteOf(d),
		},
		"cancelled on the remote": {
			dispatch: ours(running(dispatch())),
			prepare:  put(backends.Status{Phase: v1alpha1.DispatchCancelled}),
			want: withStatus(ours(running(dispatch())), func(s *v1alpha1.DispatchStatus) {
				s.Phase, s.Reason, s.CompletionTime = v1alpha1.DispatchCancelled, v1alpha1.ReasonRemoteCancelled, at(0)
				s.Conditions = conds(v1alpha1.ReasonRemoteCancelled, "", yes, no, yes)
			}),
			wantCalls:  fakeCalls{Observe: 1},
			wantWrites: 1,
			wantRemote: remoteOf(d),
		},
		"remote work that vanished fails the Dispatch and is not resubmitted": {
			dispatch: ours(running(dispatch())),
			passes:   3,
			want: withStatus(ours(running(dispatch())), func(s *v1alpha1.DispatchStatus) {
				msg := "the remote work disappeared without trainyard deleting it"
				s.Phase, s.Reason, s.Message, s.CompletionTime = v1alpha1.DispatchFailed, v1alpha1.ReasonRemoteMissing, msg, at(0)
				s.Conditions = conds(v1alpha1.ReasonRemoteMissing, msg, yes, no, yes)
			}),
			wantCalls:  fakeCalls{Observe: 1},
			wantWrites: 1,
		},
		"an observe error leaves the status as it was": {
			dispatch:   ours(running(dispatch())),
			prepare:    func(b *fakeBackend, _ *v1alpha1.Dispatch) { b.observeErr = errors.New("spoke unreachable") },
			wantResult: ctrl.Result{RequeueAfter: resync},
			want:       ours(running(dispatch())),
			wantCalls:  fakeCalls{Observe: 1},
			checkLTT:   true,
		},
		"the user the remote work runs as is recorded": {
			dispatch:   ours(running(dispatch())),
			prepare:    put(backends.Status{Phase: v1alpha1.DispatchRunning, UserID: ptr.To[int64](1001)}),
			wantResult: ctrl.Result{RequeueAfter: resync},
			want:       withStatus(ours(running(dispatch())), func(s *v1alpha1.DispatchStatus) { s.Remote.UserID = ptr.To[int64](1001) }),
			wantCalls:  fakeCalls{Observe: 1},
			wantWrites: 1,
			wantRemote: remoteOf(d),
		},
		"a recorded user is kept": {
			dispatch:   withStatus(ours(running(dispatch())), func(s *v1alpha1.DispatchStatus) { s.Remote.UserID = ptr.To[int64](1001) }),
			prepare:    put(backends.Status{Phase: v1alpha1.DispatchRunning, UserID: ptr.To[int64](2002)}),
			wantResult: ctrl.Result{RequeueAfter: resync},
			want:       withStatus(ours(running(dispatch())), func(s *v1alpha1.DispatchStatus) { s.Remote.UserID = ptr.To[int64](1001) }),
			wantCalls:  fakeCalls{Observe: 1},
			wantRemote: remoteOf(d),
		},
		"a backend phase left empty changes nothing": {
			dispatch:   ours(submitted(dispatch())),
			prepare:    put(backends.Status{}),
			wantResult: ctrl.Result{RequeueAfter: resync},
			want:       ours(submitted(dispatch())),
			wantCalls:  fakeCalls{Observe: 1},
			wantRemote: remoteOf(d),
		},
	})
}

func TestReconcileDelete(t *testing.T) {
	deleted := func(w *tytesting.DispatchWrapper) *tytesting.DispatchWrapper {
		return w.DeletionTimestamp(t0.Add(-time.Second))
	}
	withRemote := func(b *fakeBackend, d *v1alpha1.Dispatch) { b.put(d, backends.Status{Phase: v1alpha1.DispatchRunning}) }
	d := dispatch()
	runReconcile(t, map[string]reconcileCase{
		"the finalizer stays while the remote work is going": {
			dispatch: deleted(ours(running(dispatch()))),
			prepare: func(b *fakeBackend, d *v1alpha1.Dispatch) {
				withRemote(b, d)
				b.cancelLingers = true
			},
			wantResult: ctrl.Result{RequeueAfter: time.Second},
			want:       ours(running(dispatch())),
			wantCalls:  fakeCalls{Cancel: 1},
			wantRemote: remoteOf(d),
		},
		"the finalizer goes once the remote work is gone": {
			dispatch: deleted(ours(running(dispatch()))),
			prepare: func(b *fakeBackend, d *v1alpha1.Dispatch) {
				withRemote(b, d)
				b.cancelLingers = true
			},
			passes:    2,
			want:      nil, // released, so the hub deletes it
			wantCalls: fakeCalls{Cancel: 2},
		},
		"no remote work left releases at once": {
			dispatch:  deleted(ours(submitted(dispatch()))),
			want:      nil,
			wantCalls: fakeCalls{Cancel: 1},
		},
		"a finished Dispatch is cancelled too": {
			dispatch:  deleted(ours(running(dispatch()).Phase(v1alpha1.DispatchSucceeded))),
			prepare:   withRemote,
			want:      nil,
			wantCalls: fakeCalls{Cancel: 1},
		},
		"a cancel error keeps the finalizer": {
			dispatch: deleted(ours(running(dispatch()))),
			prepare: func(b *fakeBackend, d *v1alpha1.Dispatch) {
				withRemote(b, d)
				b.cancelErr = errors.New("spoke unreachable")
			},
			wantErr:    true,
			want:       ours(running(dispatch())),
			wantCalls:  fakeCalls{Cancel: 1},
			wantRemote: remoteOf(d),
		},
		"without the agent's finalizer nothing is cancelled": {
			dispatch:   deleted(running(dispatch()).Finalizers("example.com/other")),
			prepare:    withRemote,
			want:       running(dispatch()).Finalizers("example.com/other"),
			wantRemote: remoteOf(d),
		},
	})
}

func TestReconcileIgnores(t *testing.T) {
	other := func() *tytesting.DispatchWrapper { return dispatch().Target("gpu-b") }
	runReconcile(t, map[string]reconcileCase{
		"a Dispatch of another target": {
			dispatch: other(),
			want:     other(),
		},
		"a deleted Dispatch of another target": {
			dispatch:   ours(other()).DeletionTimestamp(t0),
			prepare:    func(b *fakeBackend, d *v1alpha1.Dispatch) { b.put(d, backends.Status{}) },
			want:       ours(other()),
			wantRemote: remoteOf(other()),
		},
		"a Dispatch that is gone": {},
		"a final Dispatch only gets the finalizer": {
			dispatch: withStatus(dispatch(), func(s *v1alpha1.DispatchStatus) { s.Phase = v1alpha1.DispatchRejected }),
			want:     ours(withStatus(dispatch(), func(s *v1alpha1.DispatchStatus) { s.Phase = v1alpha1.DispatchRejected })),
		},
	})
}

// TestReconcileRestartSafety: whatever the agent lost (its status write,
// its memory), remote work of one Dispatch is created once.
func TestReconcileRestartSafety(t *testing.T) {
	d := dispatch()
	runReconcile(t, map[string]reconcileCase{
		"remote work exists that the status never recorded": {
			// An earlier agent submitted and died before writing status.
			dispatch: ours(dispatch()),
			prepare: func(b *fakeBackend, d *v1alpha1.Dispatch) {
				b.put(d, backends.Status{Phase: v1alpha1.DispatchSubmitted})
			},
			wantResult: ctrl.Result{RequeueAfter: resync},
			want:       ours(submitted(dispatch())),
			wantCalls:  fakeCalls{Submit: 1, Observe: 1},
			wantWrites: 1,
			wantRemote: remoteOf(d),
		},
		"adopted work that already runs": {
			dispatch:   ours(dispatch()),
			prepare:    func(b *fakeBackend, d *v1alpha1.Dispatch) { b.put(d, backends.Status{Phase: v1alpha1.DispatchRunning}) },
			wantResult: ctrl.Result{RequeueAfter: resync},
			want: withStatus(ours(running(dispatch())), func(s *v1alpha1.DispatchStatus) {
				s.StartTime = at(0)
			}),
			wantCalls:  fakeCalls{Submit: 1, Observe: 1},
			wantWrites: 1,
			wantRemote: remoteOf(d),
		},
		"the status write after submit fails": {
			dispatch:   dispatch(),
			failWrites: 1,
			passes:     2,
			wantResult: ctrl.Result{RequeueAfter: resync},
			want:       ours(submitted(dispatch())),
			wantCalls:  fakeCalls{Submit: 2, Create: 1, Observe: 2},
			wantWrites: 2,
			wantRemote: remoteOf(d),
		},
	})
}

// TestReconcileWithFreshReconcilers runs each pass with a new reconciler, as
// a restarted agent would, over one hub and one remote system.
func TestReconcileWithFreshReconcilers(t *testing.T) {
	ctx := context.Background()
	d := dispatch().Obj()
	hub := newHub(&hubRecorder{}, d)
	be := newFakeBackend()
	for i := range 3 {
		r := &DispatchReconciler{Hub: hub, Target: testTarget, Backend: be, Clock: testingclock.NewFakeClock(t0), Resync: resync}
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(d)}); err != nil {
			t.Fatalf("pass %d: %v", i+1, err)
		}
	}
	if be.calls.Create != 1 {
		t.Errorf("remote work created %d times, want once", be.calls.Create)
	}
}

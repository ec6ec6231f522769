package spoke

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
)

const testLease = 40 * time.Second

// cutHub is a hub that fails every call while *cut is true.
func cutHub(cut *bool, objs ...client.Object) client.WithWatch {
	fail := errors.New("connection timed out")
	return fake.NewClientBuilder().WithScheme(HubScheme()).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, o client.Object, opts ...client.GetOption) error {
			if *cut {
				return fail
			}
			return c.Get(ctx, k, o, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
			if *cut {
				return fail
			}
			return c.Create(ctx, o, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
			if *cut {
				return fail
			}
			return c.Update(ctx, o, opts...)
		},
	}).Build()
}

func newTestLease(hub client.Client, clk *testingclock.FakeClock, be *fakeBackend) *Lease {
	l := &Lease{Hub: hub, Reader: hub, Namespace: agentNS, Target: testTarget, Duration: testLease,
		RenewInterval: 10 * time.Second, Clock: clk, Lister: be}
	l.init()
	return l
}

// TestLeaseSelfFence: an agent that cannot renew for its lease duration
// stops all remote work of its namespace, and only then; renewals measure
// from when they were sent, on the agent's own clock.
func TestLeaseSelfFence(t *testing.T) {
	cases := map[string]struct {
		// renewals: at each 10 s step, whether the hub answers.
		reachable []bool
		wantHeld  bool
		wantLeft  []string
	}{
		"renewing on time":                  {reachable: []bool{true, true, true, true, true, true}, wantHeld: true, wantLeft: []string{"r-1", "r-other"}},
		"cut for 30 s keeps the work":       {reachable: []bool{true, false, false, false}, wantHeld: true, wantLeft: []string{"r-1", "r-other"}},
		"cut for 40 s stops it":             {reachable: []bool{true, false, false, false, false}, wantLeft: []string{"r-other"}},
		"never reached the hub since start": {reachable: []bool{false, false, false, false, false}, wantLeft: []string{"r-other"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cut := false
			hub := cutHub(&cut)
			clk := testingclock.NewFakeClock(t0)
			be := newFakeBackend()
			be.putWork(work("r-1", agentNS, "d1", 1))
			be.putWork(work("r-other", "trainyard-gpu-b", "d9", 1))
			l := newTestLease(hub, clk, be)
			for i, ok := range tc.reachable {
				if i > 0 {
					clk.Step(10 * time.Second)
				}
				cut = !ok
				_ = l.renew(context.Background())
			}
			if !l.check() {
				if err := l.fence(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if l.Held() != tc.wantHeld {
				t.Errorf("held = %v, want %v", l.Held(), tc.wantHeld)
			}
			if diff := cmp.Diff(tc.wantLeft, be.remoteNames(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("remote work left (-want +got):\n%s", diff)
			}
			d := dispatch().Attempt(1).Obj()
			if got, want := l.Fenced(d), !tc.wantHeld; got != want {
				t.Errorf("Fenced(d1) = %v, want %v", got, want)
			}
		})
	}
}

// TestLeaseStandbyEvidence: a replica that does not renew counts a renewal
// from the send time of the last read that still showed the old version.
func TestLeaseStandbyEvidence(t *testing.T) {
	cut := false
	hub := cutHub(&cut)
	clk := testingclock.NewFakeClock(t0)
	leader := newTestLease(hub, clk, newFakeBackend())
	standby := newTestLease(hub, clk, newFakeBackend())
	if err := leader.renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	_ = standby.watch(context.Background()) // t0: version 1
	clk.Step(30 * time.Second)
	_ = standby.watch(context.Background()) // t0+30: still version 1
	if err := leader.renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	clk.Step(5 * time.Second)
	_ = standby.watch(context.Background()) // t0+35: version 2, written after t0+30
	clk.Step(34 * time.Second)
	if !standby.check() {
		t.Errorf("standby lost the lease 34 s after the read before the renewal")
	}
	clk.Step(time.Second)
	if standby.check() {
		t.Errorf("standby holds the lease 40 s after its evidence")
	}
}

// TestFencedDispatchIsReported: work stopped for want of a lease is not
// submitted again; once the lease is back, its Dispatch says AgentFenced,
// which the hub requeues.
func TestFencedDispatchIsReported(t *testing.T) {
	d := running(ours(dispatch()).Attempt(1)).Obj()
	rec := &hubRecorder{}
	hub := newHub(rec, d)
	clk := testingclock.NewFakeClock(t0)
	be := newFakeBackend()
	be.put(d, backends.Status{Phase: v1alpha1.DispatchRunning})
	wake := make(chan event.GenericEvent, 4)
	l := newTestLease(hub, clk, be)
	l.Wake = wake
	l.Reader = cutHub(new(bool))
	r := &DispatchReconciler{Hub: hub, Target: testTarget, Backend: be, Clock: clk, Resync: time.Minute, Lease: l}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(d)}

	clk.Step(testLease)
	if l.check() {
		t.Fatal("lease held without a renewal")
	}
	if err := l.fence(context.Background()); err != nil {
		t.Fatal(err)
	}
	if res, err := r.Reconcile(context.Background(), req); err != nil || res.RequeueAfter != leaseWait {
		t.Fatalf("without a lease: %+v, %v; want a wait of %s", res, err, leaseWait)
	}
	if be.has(d) {
		t.Fatal("remote work made again without a lease")
	}
	if err := l.renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !l.check() || len(wake) != 1 {
		t.Fatalf("lease back: held %v, %d wakes; want held and 1", l.Held(), len(wake))
	}
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	var got v1alpha1.Dispatch
	if err := hub.Get(context.Background(), req.NamespacedName, &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != v1alpha1.DispatchFailed || got.Status.Reason != v1alpha1.ReasonAgentFenced {
		t.Errorf("status = %s/%s, want Failed/%s", got.Status.Phase, got.Status.Reason, v1alpha1.ReasonAgentFenced)
	}
	if be.has(d) || l.Fenced(&got) {
		t.Errorf("after the report: remote %v, still fenced %v; want neither", be.has(d), l.Fenced(&got))
	}
}

// TestFenceDuringAPassIsNotALoss: the lease runs out while a reconcile
// is between its lease check and its observation, and the watchdog deletes
// the work under it. The Dispatch must say AgentFenced (the hub requeues),
// never RemoteMissing (the TrainJob fails).
func TestFenceDuringAPassIsNotALoss(t *testing.T) {
	d := running(ours(dispatch()).Attempt(1)).Obj()
	hub := newHub(&hubRecorder{}, d)
	clk := testingclock.NewFakeClock(t0)
	be := newFakeBackend()
	be.put(d, backends.Status{Phase: v1alpha1.DispatchRunning})
	l := newTestLease(hub, clk, be)
	be.beforeObserve = func() {
		clk.Step(testLease)
		if l.check() {
			t.Error("lease held without a renewal")
		}
		if err := l.fence(context.Background()); err != nil {
			t.Error(err)
		}
	}
	got := reconcileWithLease(t, hub, be, clk, l, d)
	if be.has(d) {
		t.Fatal("the watchdog did not delete the work")
	}
	if got.Status.Reason != v1alpha1.ReasonAgentFenced {
		t.Errorf("status = %s/%s, want Failed/%s", got.Status.Phase, got.Status.Reason, v1alpha1.ReasonAgentFenced)
	}
}

// TestWorkStoppedBeforeARestartIsReportedAsFenced: an agent stopped its
// work when its lease ran out, then restarted (a cut-off leader exits when
// it loses its election) and forgot what it stopped. The replica that takes
// the lapsed Lease over reads work it finds gone, or cancelled on Slurm, as
// fenced (the hub requeues) rather than lost (the TrainJob fails); with a
// Lease that never lapsed it is lost as before.
func TestWorkStoppedBeforeARestartIsReportedAsFenced(t *testing.T) {
	cases := map[string]struct {
		// lastRenewal is the previous holder's renewTime, before t0.
		lastRenewal time.Duration
		// remote is what the backend has of the work (nil: nothing).
		remote     *backends.Status
		wantReason string
	}{
		"gone after a lapse: fenced":         {lastRenewal: 2 * testLease, wantReason: v1alpha1.ReasonAgentFenced},
		"cancelled after a lapse: fenced":    {lastRenewal: 2 * testLease, remote: &backends.Status{Phase: v1alpha1.DispatchCancelled}, wantReason: v1alpha1.ReasonAgentFenced},
		"gone, lease never lapsed: lost":     {lastRenewal: 5 * time.Second, wantReason: v1alpha1.ReasonRemoteMissing},
		"cancelled, never lapsed: cancelled": {lastRenewal: 5 * time.Second, remote: &backends.Status{Phase: v1alpha1.DispatchCancelled}, wantReason: v1alpha1.ReasonRemoteCancelled},
		"succeeded after a lapse: succeeded": {lastRenewal: 2 * testLease, remote: &backends.Status{Phase: v1alpha1.DispatchSucceeded}, wantReason: v1alpha1.ReasonRemoteSucceeded},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := running(ours(dispatch()).Attempt(1)).Obj()
			seconds := int32(testLease / time.Second)
			previous := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Namespace: agentNS, Name: v1alpha1.LeaseName(testTarget)},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("before-restart"), LeaseDurationSeconds: &seconds,
					RenewTime: &metav1.MicroTime{Time: t0.Add(-tc.lastRenewal)}},
			}
			hub := newHub(&hubRecorder{}, d, previous)
			clk := testingclock.NewFakeClock(t0)
			be := newFakeBackend()
			if tc.remote != nil {
				be.put(d, *tc.remote)
			}
			l := newTestLease(hub, clk, be)
			if err := l.renew(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := reconcileWithLease(t, hub, be, clk, l, d)
			if got.Status.Reason != tc.wantReason {
				t.Errorf("status = %s/%s, want reason %s", got.Status.Phase, got.Status.Reason, tc.wantReason)
			}
		})
	}
}

// reconcileWithLease runs one pass of a reconciler that holds l over d and
// returns d as the hub holds it afterwards.
func reconcileWithLease(t *testing.T, hub client.Client, be *fakeBackend, clk *testingclock.FakeClock, l *Lease, d *v1alpha1.Dispatch) v1alpha1.Dispatch {
	t.Helper()
	r := &DispatchReconciler{Hub: hub, Target: testTarget, Backend: be, Clock: clk, Resync: time.Minute, Lease: l}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(d)}
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	var got v1alpha1.Dispatch
	if err := hub.Get(context.Background(), req.NamespacedName, &got); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestLeaseReady: an agent is ready once it renewed (or, standing by, read)
// its lease since it started, and only while it holds it.
func TestLeaseReady(t *testing.T) {
	ready := func(l *Lease) error { return l.Ready(httptest.NewRequest("GET", "/readyz", nil)) }
	cut := true
	hub := cutHub(&cut)
	clk := testingclock.NewFakeClock(t0)
	leader := newTestLease(hub, clk, newFakeBackend())
	if err := leader.renew(context.Background()); err == nil {
		t.Fatal("renewed through a cut hub")
	}
	if err := ready(leader); err == nil {
		t.Error("ready before the hub ever answered")
	}
	cut = false
	standby := newTestLease(hub, clk, newFakeBackend())
	if err := standby.watch(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := ready(standby); err != nil {
		t.Errorf("standby that read the hub (no Lease yet): %v, want ready", err)
	}
	if err := leader.renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := ready(leader); err != nil {
		t.Errorf("after a renewal: %v, want ready", err)
	}
	cut = true
	clk.Step(testLease)
	_ = leader.renew(context.Background())
	if err := ready(leader); err == nil {
		t.Error("ready a whole lease after the last renewal")
	}
}

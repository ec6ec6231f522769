package spoke

import (
	"context"
	"errors"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
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

// testFenceAfter is the tests' fence deadline: longer than the lease, as
// in production.
const testFenceAfter = 2 * time.Minute

func newTestLease(hub client.Client, clk *testingclock.FakeClock, be *fakeBackend) *Lease {
	l := &Lease{Hub: hub, Reader: hub, Namespace: agentNS, Target: testTarget, Duration: testLease,
		RenewInterval: 10 * time.Second, FenceAfter: testFenceAfter, Clock: clk, Lister: be}
	l.init()
	return l
}

// watchdog is one look of the watchdog in Start: it fences only when it
// must.
func watchdog(t *testing.T, l *Lease) {
	t.Helper()
	if !l.check() && l.mustFence() {
		if err := l.fence(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLeaseSelfFence: an agent that cannot renew for its lease duration
// starts no new work, and keeps running what runs. Only on a target whose
// leaseLoss is Requeue, and only after the fence deadline, does it stop the
// work of its namespace that has not finished. Renewals measure from when
// they were sent, on the agent's own clock.
func TestLeaseSelfFence(t *testing.T) {
	cut := func(d time.Duration) []bool {
		r := []bool{true}
		for range int(d / (10 * time.Second)) {
			r = append(r, false)
		}
		return r
	}
	all := []string{"r-1", "r-done", "r-other"}
	cases := map[string]struct {
		// renewals: at each 10 s step, whether the hub answers.
		reachable []bool
		policy    v1alpha1.LeaseLossPolicy
		wantHeld  bool
		wantLeft  []string
	}{
		"renewing on time":                                  {reachable: []bool{true, true, true, true, true, true}, wantHeld: true, wantLeft: all},
		"cut for 30 s keeps the work":                       {reachable: cut(30 * time.Second), wantHeld: true, wantLeft: all},
		"cut for 40 s: nothing new, work runs on":           {reachable: cut(40 * time.Second), wantLeft: all},
		"cut for 110 s: work runs on":                       {reachable: cut(110 * time.Second), wantLeft: all},
		"cut for 2 min on Requeue: unfinished work stopped": {reachable: cut(testFenceAfter), wantLeft: []string{"r-done", "r-other"}},
		"cut for 10 min on Hold: nothing stopped":           {reachable: cut(10 * time.Minute), policy: v1alpha1.LeaseLossHold, wantLeft: all},
		"never reached the hub since start":                 {reachable: append([]bool{false}, cut(testFenceAfter)[1:]...), wantLeft: []string{"r-done", "r-other"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cut := false
			hub := cutHub(&cut)
			clk := testingclock.NewFakeClock(t0)
			be := newFakeBackend()
			be.putWork(work("r-1", agentNS, "d1", 1))
			done := work("r-done", agentNS, "d2", 1)
			done.Finished = true
			be.putWork(done)
			be.putWork(work("r-other", "trainyard-gpu-b", "d9", 1))
			l := newTestLease(hub, clk, be)
			if tc.policy != "" {
				l.Policy = func(context.Context) (v1alpha1.LeaseLossPolicy, error) { return tc.policy, nil }
			}
			for i, ok := range tc.reachable {
				if i > 0 {
					clk.Step(10 * time.Second)
				}
				cut = !ok
				_ = l.renew(context.Background())
				watchdog(t, l)
			}
			if l.Held() != tc.wantHeld {
				t.Errorf("held = %v, want %v", l.Held(), tc.wantHeld)
			}
			if diff := cmp.Diff(tc.wantLeft, be.remoteNames(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("remote work left (-want +got):\n%s", diff)
			}
			d := dispatch().Attempt(1).Obj()
			if got, want := l.Fenced(d), !slices.Contains(tc.wantLeft, "r-1"); got != want {
				t.Errorf("Fenced(d1) = %v, want %v", got, want)
			}
		})
	}
}

// TestLeaseSaysWhatTheAgentEnforces: every renewal writes the policy the
// agent enforces, its fence deadline and its stop bound; a Requeue is
// enforced from the moment it is written (the write may land though the
// agent never hears so), a Hold only once it was written.
func TestLeaseSaysWhatTheAgentEnforces(t *testing.T) {
	cut := false
	hub := cutHub(&cut)
	clk := testingclock.NewFakeClock(t0)
	l := newTestLease(hub, clk, newFakeBackend())
	l.Stop = stopBound(45 * time.Second)
	policy := v1alpha1.LeaseLossHold
	l.Policy = func(context.Context) (v1alpha1.LeaseLossPolicy, error) { return policy, nil }
	if err := l.renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	var lease coordinationv1.Lease
	if err := hub.Get(context.Background(), client.ObjectKey{Namespace: agentNS, Name: v1alpha1.LeaseName(testTarget)}, &lease); err != nil {
		t.Fatal(err)
	}
	want := v1alpha1.Advertised{FenceAfter: testFenceAfter, StopWithin: 45 * time.Second}
	if diff := cmp.Diff(want, v1alpha1.AdvertisedBy(&lease)); diff != "" {
		t.Errorf("advertised (-want +got):\n%s", diff)
	}
	if l.mayRequeue {
		t.Error("after writing Hold the agent still fences")
	}
	policy, cut = v1alpha1.LeaseLossRequeue, true
	_ = l.renew(context.Background())
	if l.mayRequeue {
		t.Error("a Requeue read while the hub is cut made the agent fence; the read failed, nothing was written")
	}
	cut = false
	failUpdate := true
	l.Hub = interceptor.NewClient(hub.(client.WithWatch), interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
			if failUpdate {
				return errors.New("timeout awaiting response headers")
			}
			return c.Update(ctx, o, opts...)
		}})
	if err := l.renew(context.Background()); err == nil {
		t.Fatal("renewed through a failing update")
	}
	if !l.mayRequeue {
		t.Error("a Requeue write that may have landed did not make the agent fence")
	}
	standby := newTestLease(hub, clk, newFakeBackend())
	if err := standby.watch(context.Background()); err != nil {
		t.Fatal(err)
	}
	if standby.mayRequeue {
		t.Error("a standby reading a Lease that says Hold fences")
	}
}

type stopBound time.Duration

func (s stopBound) StopWithin() time.Duration { return time.Duration(s) }

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

	clk.Step(testFenceAfter)
	if l.check() || !l.mustFence() {
		t.Fatal("lease held, or no fence due, a fence deadline without a renewal")
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
		clk.Step(testFenceAfter)
		if l.check() || !l.mustFence() {
			t.Error("lease held, or no fence due, a fence deadline without a renewal")
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

// TestWorkAStandbyStoppedIsReportedAsFenced: with two replicas, both cut
// off from the hub, the standby (whose evidence trails the leader's by up to
// a read interval) reaches the fence deadline first and stops the work; the
// leader remembers nothing of it. Once the leader reaches the hub again, the
// work it finds gone is fenced (the hub requeues), not lost (the TrainJob
// fails), even when the cut ended just before its own deadline. A cut well
// short of the deadline leaves a disappearance a loss, unless the standby
// recorded its stop where the replicas elect (FenceRecord).
func TestWorkAStandbyStoppedIsReportedAsFenced(t *testing.T) {
	cases := map[string]struct {
		cut time.Duration
		// shared: the replicas share a FenceRecord, and the standby's
		// fence writes it.
		shared     bool
		wantReason string
	}{
		"past the leader's deadline": {cut: testFenceAfter + time.Second, wantReason: v1alpha1.ReasonAgentFenced},
		"one read short of it":       {cut: testFenceAfter - 10*time.Second, wantReason: v1alpha1.ReasonAgentFenced},
		"well short of it":           {cut: testFenceAfter / 2, wantReason: v1alpha1.ReasonRemoteMissing},
		"well short of it, recorded by the standby (its evidence trailed: it had just started)": {
			cut: testFenceAfter / 2, shared: true, wantReason: v1alpha1.ReasonAgentFenced},
		"past the deadline, recorded": {cut: testFenceAfter + time.Second, shared: true, wantReason: v1alpha1.ReasonAgentFenced},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			d := running(ours(dispatch()).Attempt(1)).Obj()
			hub := newHub(&hubRecorder{}, d)
			clk := testingclock.NewFakeClock(t0)
			be := newFakeBackend()
			be.put(d, backends.Status{Phase: v1alpha1.DispatchRunning})
			leader := newTestLease(hub, clk, be)
			var record *FenceRecord
			if tc.shared {
				spoke := fake.NewClientBuilder().WithScheme(SpokeScheme()).Build()
				record = &FenceRecord{Client: spoke, Namespace: "trainyard-agents", Name: FenceRecordName(testTarget)}
				leader.Record = record
			}
			if err := leader.renew(context.Background()); err != nil {
				t.Fatal(err)
			}
			// Cut off: no renewal succeeds.
			for step := time.Duration(0); step < tc.cut; step += time.Second {
				clk.Step(time.Second)
				leader.markLapse()
				leader.check()
			}
			// The standby's fence, which the leader does not see but in the
			// record they share.
			if tc.shared {
				standby := newTestLease(hub, clk, be)
				standby.Record = record
				if err := standby.fence(ctx); err != nil {
					t.Fatal(err)
				}
			} else if err := be.Delete(ctx, backends.RemoteWork{Ref: fakeRef(d), DispatchNamespace: d.Namespace, DispatchName: d.Name, Attempt: 1}); err != nil {
				t.Fatal(err)
			}
			if err := leader.renew(ctx); err != nil {
				t.Fatal(err)
			}
			got := reconcileWithLease(t, hub, be, clk, leader, d)
			if got.Status.Reason != tc.wantReason {
				t.Errorf("status = %s/%s, want reason %s", got.Status.Phase, got.Status.Reason, tc.wantReason)
			}
			if tc.shared {
				// Reported, so forgotten by the record too.
				if has, err := record.Has(ctx, fencedKey{d.Namespace, d.Name, 1}); err != nil || has {
					t.Errorf("record after the report: has = %v, %v; want false", has, err)
				}
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

// TestFenceAnnouncesOnce: work whose processes take a while to end is
// listed, and deleted, again by each pass; it is counted and announced once.
func TestFenceAnnouncesOnce(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	be := newFakeBackend()
	rec := record.NewFakeRecorder(10)
	l := newTestLease(cutHub(new(bool)), clk, be)
	l.Recorder = rec
	w := work("r-1", agentNS, "d1", 1)
	for pass := range 3 {
		be.putWork(w) // still Terminating: listed again
		if err := l.fence(context.Background()); err != nil {
			t.Fatalf("pass %d: %v", pass, err)
		}
	}
	if got := len(be.calls.Deleted); got != 3 {
		t.Errorf("%d deletes, want one a pass (3)", got)
	}
	if got := len(rec.Events); got != 1 {
		t.Errorf("%d SelfFenced events, want 1", got)
	}
	if !l.Fenced(dispatch().Attempt(1).Obj()) {
		t.Error("the stopped attempt is not remembered")
	}
}

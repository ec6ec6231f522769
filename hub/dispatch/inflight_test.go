package dispatch

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/placement"
	tyt "github.com/trainyard-dev/trainyard/internal/testing"
)

// TestParallelBookingsNeverOverbook: workers deciding at once book no more
// GPUs than a target has, node by node, and the jobs left over wait.
func TestParallelBookingsNeverOverbook(t *testing.T) {
	const nodes, jobs = 6, 20
	free := make([]int32, nodes)
	for i := range free {
		free[i] = 8
	}
	target := spokeTarget("gpu-a", "h100").AgentNamespace("agents").Available().
		FreeGPUsPerNode(free...).MaxGPUsPerNode(8).Obj()
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(target).Build()
	r := NewReconciler(c, c, nil, clocktesting.NewFakeClock(t0), Options{})
	req := placement.Request{Flavors: []string{"h100"}, PodSets: []placement.PodSet{{Name: "node", Count: 1, GPUsPerPod: 8}}}

	booked := map[string]int64{}
	waited := decideInParallel(t, r, jobs, req, func(_ *kueue.Workload, b booking) {
		for _, res := range b.decision.Reservations() {
			booked[res.Node] += res.GPUs
		}
	})
	if len(booked) != nodes || waited != jobs-nodes {
		t.Errorf("booked nodes %v and %d waiting, want each of %d nodes once and %d waiting", booked, waited, nodes, jobs-nodes)
	}
	for node, n := range booked {
		if n > 8 {
			t.Errorf("node %s booked %d GPUs of 8", node, n)
		}
	}
	r.flight.mu.Lock()
	defer r.flight.mu.Unlock()
	if got := len(r.flight.waiting); got != jobs-nodes {
		t.Errorf("%d Workloads recorded as waiting, want %d", got, jobs-nodes)
	}
}

func pendingDispatch(name, target string, phase v1alpha1.DispatchPhase) *v1alpha1.Dispatch {
	d := tyt.MakeDispatch(name, "agents", target).Attempt(1).Obj()
	d.Spec.Workload = v1alpha1.WorkloadReference{Namespace: "team-a", Name: name, UID: types.UID(name)}
	d.Status.Phase = phase
	return d
}

// TestWatchTakesOverBookings: the watch replaces a booking by the Dispatch
// it booked, counts a live Dispatch once, and drops it when it finishes,
// waking the Workloads that wait for room; a failed write gives back only
// a booking, never what the watch showed.
func TestWatchTakesOverBookings(t *testing.T) {
	f := newInflight()
	waiter := types.NamespacedName{Namespace: "team-a", Name: "waiter"}
	count := func() int64 {
		f.mu.Lock()
		defer f.mu.Unlock()
		n, _ := f.onTargetLocked("gpu-a", &v1alpha1.TargetStatus{}, "", t0)
		return n
	}
	f.mu.Lock()
	f.bookLocked("agents/a", "gpu-a", "a", types.NamespacedName{Namespace: "team-a", Name: "a"}, 8, nil, false, t0)
	f.bookLocked("agents/b", "gpu-a", "b", types.NamespacedName{Namespace: "team-a", Name: "b"}, 4, nil, false, t0)
	f.waitLocked(waiter, waitingFor(1, "h100"))
	f.mu.Unlock()
	f.recordTarget(spokeTarget("gpu-a", "h100").Available().FreeGPUs(16).Obj())
	if !f.booked("a") || count() != 12 {
		t.Fatalf("booked(a) = %v, in flight %d; want true, 12", f.booked("a"), count())
	}
	if wake := f.observe(pendingDispatch("a", "gpu-a", ""), 8); len(wake) != 0 || f.booked("a") || count() != 12 {
		t.Errorf("after the watch showed a: woke %v, booked(a) = %v, in flight %d; want none, false, 12", wake, f.booked("a"), count())
	}
	if wake := f.unbook("agents/a", "gpu-a"); len(wake) != 0 || count() != 12 {
		t.Errorf("unbook of a watched Dispatch woke %v, left %d in flight; want none, 12", wake, count())
	}
	want := []reconcile.Request{{NamespacedName: waiter}}
	if wake := f.unbook("agents/b", "gpu-a"); !cmp.Equal(want, wake) || count() != 8 {
		t.Errorf("unbook of b woke %v, left %d in flight; want %v, 8", wake, count(), want)
	}
	if wake := f.observe(pendingDispatch("a", "gpu-a", v1alpha1.DispatchSucceeded), 8); !cmp.Equal(want, wake) || count() != 0 {
		t.Errorf("a finished: woke %v, left %d in flight; want %v, 0", wake, count(), want)
	}
	if f.size() != 0 {
		t.Errorf("%d entries left, want none", f.size())
	}
}

// TestBookingsExpire: a booking the watch never confirms stops counting.
func TestBookingsExpire(t *testing.T) {
	f := newInflight()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bookLocked("agents/a", "gpu-a", "a", types.NamespacedName{Name: "a"}, 8, nil, false, t0)
	if n, _ := f.onTargetLocked("gpu-a", &v1alpha1.TargetStatus{}, "", t0.Add(bookingTTL+time.Second)); n != 0 {
		t.Errorf("stale booking still counts %d GPUs", n)
	}
}

// TestRunningLeavesFlightWithTheCountingReading: a running Dispatch, as
// the watch records it, counts until the target publishes the capacity
// reading its agent stamped on it; without a stamp, until a heartbeat
// taken after its start.
func TestRunningLeavesFlightWithTheCountingReading(t *testing.T) {
	before, after := &metav1.Time{Time: t0.Add(-time.Second)}, &metav1.Time{Time: t0.Add(time.Second)}
	cases := map[string]struct {
		countedFrom int64
		reported    v1alpha1.TargetStatus
		want        int64
	}{
		"unstamped, heartbeat before the start":    {reported: v1alpha1.TargetStatus{LastHeartbeatTime: before}, want: 8},
		"unstamped, heartbeat after the start":     {reported: v1alpha1.TargetStatus{LastHeartbeatTime: after}, want: 0},
		"stamped, its reading not published":       {countedFrom: 5, reported: v1alpha1.TargetStatus{CapacityReading: 4, LastHeartbeatTime: after}, want: 8},
		"stamped, its reading published":           {countedFrom: 5, reported: v1alpha1.TargetStatus{CapacityReading: 5, LastHeartbeatTime: before}, want: 0},
		"stamped, a later reading published":       {countedFrom: 5, reported: v1alpha1.TargetStatus{CapacityReading: 9}, want: 0},
		"stamped, heartbeat time is not consulted": {countedFrom: 5, reported: v1alpha1.TargetStatus{CapacityReading: 3, LastHeartbeatTime: after}, want: 8},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newInflight()
			d := pendingDispatch("a", "gpu-a", v1alpha1.DispatchRunning)
			d.Status.StartTime = &metav1.Time{Time: t0}
			d.Status.CountedFromReading = tc.countedFrom
			f.observe(d, 8)
			f.mu.Lock()
			defer f.mu.Unlock()
			if n, _ := f.onTargetLocked("gpu-a", &tc.reported, "", t0); n != tc.want {
				t.Errorf("%d GPUs in flight, want %d", n, tc.want)
			}
		})
	}
}

func TestMayHaveMoreRoom(t *testing.T) {
	base := spokeTarget("gpu-a", "h100").Available().FreeGPUsPerNode(8, 0).MaxGPUsPerNode(8)
	heartbeat := base.Clone().Obj()
	heartbeat.Status.LastHeartbeatTime = &metav1.Time{Time: t0}
	cases := map[string]struct {
		updated *v1alpha1.Target
		want    bool
	}{
		"a heartbeat alone":  {updated: heartbeat},
		"fewer free GPUs":    {updated: base.Clone().FreeGPUsPerNode(0, 0).Obj(), want: true},
		"more free GPUs":     {updated: base.Clone().FreeGPUsPerNode(8, 8).Obj(), want: true},
		"free GPUs moved":    {updated: base.Clone().FreeGPUsPerNode(0, 8).Obj(), want: true},
		"spec changed":       {updated: func() *v1alpha1.Target { t := base.Clone().Obj(); t.Generation++; return t }(), want: true},
		"larger nodes known": {updated: base.Clone().MaxGPUsPerNode(16).Obj(), want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := mayHaveMoreRoom(base.Obj(), tc.updated); got != tc.want {
				t.Errorf("mayHaveMoreRoom = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestTargetChangesWakeOnlyWhomTheyAffect: a heartbeat wakes no one; more
// room wakes the waiting Workloads only; an availability flip also wakes
// the Workloads with unfinished Dispatches on the target, not those whose
// Dispatch there finished.
func TestTargetChangesWakeOnlyWhomTheyAffect(t *testing.T) {
	running := pendingDispatch("running", "gpu-a", v1alpha1.DispatchRunning)
	done := pendingDispatch("done", "gpu-a", v1alpha1.DispatchSucceeded)
	elsewhere := pendingDispatch("elsewhere", "gpu-b", v1alpha1.DispatchRunning)
	c := withDispatchIndexes(fake.NewClientBuilder().WithScheme(testScheme(t))).WithObjects(running, done, elsewhere).Build()
	r := NewReconciler(c, c, nil, clocktesting.NewFakeClock(t0), Options{})
	waiter := types.NamespacedName{Namespace: "team-a", Name: "waiter"}
	r.flight.waitLocked(waiter, waitingFor(1, "h100"))

	base := spokeTarget("gpu-a", "h100").Available().FreeGPUs(8)
	beat := base.Clone().Obj()
	beat.Status.LastHeartbeatTime = &metav1.Time{Time: t0}
	onTarget := types.NamespacedName{Namespace: "team-a", Name: "running"}
	cases := map[string]struct {
		updated *v1alpha1.Target
		want    []types.NamespacedName
	}{
		"a heartbeat":   {updated: beat},
		"GPUs freed":    {updated: base.Clone().FreeGPUs(16).Obj(), want: []types.NamespacedName{waiter}},
		"lease expired": {updated: base.Clone().AvailableCondition(metav1.ConditionFalse, v1alpha1.ReasonLeaseExpired).Obj(), want: []types.NamespacedName{onTarget, waiter}},
		"its flavor dropped": {updated: func() *v1alpha1.Target {
			t := base.Clone().Flavors("a100").Obj()
			t.Generation++
			return t
		}(), want: []types.NamespacedName{waiter}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			defer q.ShutDown()
			r.targetHandler().Update(context.Background(), event.UpdateEvent{ObjectOld: base.Obj(), ObjectNew: tc.updated}, q)
			got := []types.NamespacedName{}
			for q.Len() > 0 {
				req, _ := q.Get()
				got = append(got, req.NamespacedName)
				q.Done(req)
			}
			sort.Slice(got, func(i, j int) bool { return got[i].Name < got[j].Name })
			if diff := cmp.Diff(append([]types.NamespacedName{}, tc.want...), got); diff != "" {
				t.Errorf("woken (-want +got):\n%s", diff)
			}
		})
	}
}

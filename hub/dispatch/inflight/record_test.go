package inflight

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/internal/metrics"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

func pendingDispatch(name, target string, phase v1alpha1.DispatchPhase) *v1alpha1.Dispatch {
	d := tytesting.MakeDispatch(name, "agents", target).Attempt(1).Obj()
	d.Spec.Workload = v1alpha1.WorkloadReference{Namespace: "team-a", Name: name, UID: types.UID(name)}
	d.Status.Phase = phase
	return d
}

// TestWatchTakesOverBookings: the watch replaces a booking by the Dispatch
// it booked, counts a live Dispatch once, and drops it when it finishes,
// waking the Workloads that wait for room; a failed write gives back only
// a booking, never what the watch showed.
func TestWatchTakesOverBookings(t *testing.T) {
	f := New(time.Now)
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
	f.RecordTarget(spokeTarget("gpu-a", "h100").Available().FreeGPUs(16).Obj())
	if !f.Booked("a") || count() != 12 {
		t.Fatalf("booked(a) = %v, in flight %d; want true, 12", f.Booked("a"), count())
	}
	if wake := f.Observe(pendingDispatch("a", "gpu-a", ""), 8); len(wake) != 0 || f.Booked("a") || count() != 12 {
		t.Errorf("after the watch showed a: woke %v, Booked(a) = %v, in flight %d; want none, false, 12", wake, f.Booked("a"), count())
	}
	if wake := f.Unbook("agents/a", "gpu-a"); len(wake) != 0 || count() != 12 {
		t.Errorf("unbook of a watched Dispatch woke %v, left %d in flight; want none, 12", wake, count())
	}
	want := []reconcile.Request{{NamespacedName: waiter}}
	if wake := f.Unbook("agents/b", "gpu-a"); !cmp.Equal(want, wake) || count() != 8 {
		t.Errorf("unbook of b woke %v, left %d in flight; want %v, 8", wake, count(), want)
	}
	if wake := f.Observe(pendingDispatch("a", "gpu-a", v1alpha1.DispatchSucceeded), 8); !cmp.Equal(want, wake) || count() != 0 {
		t.Errorf("a finished: woke %v, left %d in flight; want %v, 0", wake, count(), want)
	}
	if f.size() != 0 {
		t.Errorf("%d entries left, want none", f.size())
	}
}

// TestBookingsExpire: a booking the watch never confirms stops counting.
func TestBookingsExpire(t *testing.T) {
	f := New(time.Now)
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
			f := New(time.Now)
			d := pendingDispatch("a", "gpu-a", v1alpha1.DispatchRunning)
			d.Status.StartTime = &metav1.Time{Time: t0}
			d.Status.CountedFromReading = tc.countedFrom
			f.Observe(d, 8)
			f.mu.Lock()
			defer f.mu.Unlock()
			if n, _ := f.onTargetLocked("gpu-a", &tc.reported, "", t0); n != tc.want {
				t.Errorf("%d GPUs in flight, want %d", n, tc.want)
			}
		})
	}
}

// TestQueuedStartWakesWaiting: a queued Dispatch holds its place in the
// target's queue until it runs; then the Workloads waiting on the hub
// wake, as they do when any Dispatch ends. The mark is read from the
// watched Dispatch, so a restarted hub counts the same.
func TestQueuedStartWakesWaiting(t *testing.T) {
	f := New(time.Now)
	waiter := types.NamespacedName{Namespace: "team-a", Name: "waiter"}
	f.waitLocked(waiter, waitingFor(1, "hpc"))
	f.RecordTarget(tytesting.MakeSlurmTarget("hpc", "hpc", "gpu").Available().SlurmQueueDepth(1).Obj())
	queuedDispatch := func(phase v1alpha1.DispatchPhase) *v1alpha1.Dispatch {
		d := pendingDispatch("q", "hpc", phase)
		d.Annotations = map[string]string{v1alpha1.AnnotationQueued: "true"}
		return d
	}
	placesTaken := func() int32 {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.queuedLocked("hpc")
	}
	if wake := f.Observe(queuedDispatch(""), 1); len(wake) != 0 || placesTaken() != 1 {
		t.Fatalf("new queued Dispatch: woke %v, %d places taken; want none, 1", wake, placesTaken())
	}
	if wake := f.Observe(queuedDispatch(v1alpha1.DispatchSubmitted), 1); len(wake) != 0 || placesTaken() != 1 {
		t.Errorf("submitted: woke %v, %d places taken; want none, 1", wake, placesTaken())
	}
	want := []reconcile.Request{{NamespacedName: waiter}}
	if wake := f.Observe(queuedDispatch(v1alpha1.DispatchRunning), 1); !cmp.Equal(want, wake) || placesTaken() != 0 {
		t.Errorf("running: woke %v, %d places taken; want %v, 0", wake, placesTaken(), want)
	}
	if wake := f.Observe(queuedDispatch(v1alpha1.DispatchRunning), 1); len(wake) != 0 {
		t.Errorf("running again: woke %v, want none", wake)
	}
	if f.Observe(pendingDispatch("fits", "hpc", ""), 1); placesTaken() != 0 {
		t.Errorf("a Dispatch that fit takes %d places of the queue, want 0", placesTaken())
	}
}

// TestSettledStartWakesWaiting: a job sent to fit a Kubernetes spoke that
// takes queued jobs keeps the waiting out of its queue until the spoke's
// reading counts it (unsettledLocked). Its start wakes them only when the
// last reading already counts it; otherwise the reading that does wakes
// them (RecordTarget), and a wake at the start would find no room.
func TestSettledStartWakesWaiting(t *testing.T) {
	cases := map[string]struct {
		reading, countedFrom int64
		queueDepth           int32
		wantWake             bool
	}{
		"the last reading counts it":     {reading: 5, countedFrom: 5, queueDepth: 1, wantWake: true},
		"a later reading counts it":      {reading: 7, countedFrom: 5, queueDepth: 1, wantWake: true},
		"no reading counts it yet":       {reading: 4, countedFrom: 5, queueDepth: 1},
		"the spoke takes no queued jobs": {reading: 5, countedFrom: 5, queueDepth: 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := New(time.Now)
			waiter := types.NamespacedName{Namespace: "team-a", Name: "waiter"}
			f.mu.Lock()
			f.waitLocked(waiter, waitingFor(1, "h100"))
			f.mu.Unlock()
			target := tytesting.MakeKubernetesTarget("gpu-a", "h100").Available().KubernetesQueueDepth(tc.queueDepth).Obj()
			target.Status.CapacityReading = tc.reading
			f.RecordTarget(target)
			d := pendingDispatch("a", "gpu-a", v1alpha1.DispatchSubmitted)
			if wake := f.Observe(d, 1); len(wake) != 0 {
				t.Fatalf("submitted: woke %v, want none", wake)
			}
			d = d.DeepCopy()
			d.Status.Phase, d.Status.StartTime, d.Status.CountedFromReading = v1alpha1.DispatchRunning, &metav1.Time{Time: t0}, tc.countedFrom
			wake := f.Observe(d, 1)
			if got := len(wake) != 0; got != tc.wantWake {
				t.Errorf("started: woke %v, want a wake %v", wake, tc.wantWake)
			}
			if wake := f.Observe(d, 1); len(wake) != 0 {
				t.Errorf("seen running again: woke %v, want none", wake)
			}
		})
	}
}

// TestCounts: the hub's gauges read the record, not the cache: Dispatches
// not yet running per target, the queued ones among them, and the waiting
// line with the time each first found no room, and the queue depth of
// each target that takes queued jobs.
func TestCounts(t *testing.T) {
	f := New(time.Now)
	f.RecordTarget(tytesting.MakeSlurmTarget("hpc", "hpc", "gpu").Obj())
	f.RecordTarget(spokeTarget("gpu-a", "h100").Obj())
	q := pendingDispatch("q", "hpc", v1alpha1.DispatchSubmitted)
	q.Annotations = map[string]string{v1alpha1.AnnotationQueued: "true"}
	f.Observe(q, 1)
	f.Observe(pendingDispatch("p", "hpc", v1alpha1.DispatchPending), 1)
	f.Observe(pendingDispatch("r", "hpc", v1alpha1.DispatchRunning), 1)
	f.Observe(pendingDispatch("done", "hpc", v1alpha1.DispatchSucceeded), 1)
	f.mu.Lock()
	f.bookLocked("agents/b", "gpu-a", "b", types.NamespacedName{Name: "b"}, 8, nil, false, t0)
	f.mu.Unlock()
	f.now = func() time.Time { return t0.Add(time.Minute) }
	joinLine(f, types.NamespacedName{Name: "w"}, waitingFor(4, "hpc"))
	want := metrics.FlightCounts{
		InFlight:   map[string]int{"hpc": 2, "gpu-a": 1},
		Queued:     map[string]int{"hpc": 1},
		QueueLimit: map[string]int{"hpc": int(v1alpha1.DefaultSlurmQueueDepth)},
		Waiting:    []metrics.WaitingJob{{Flavors: []string{"hpc"}, Since: t0.Add(time.Minute)}},
	}
	if diff := cmp.Diff(want, f.Counts()); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
}

// Package inflight is the hub's record of what it sent to each target and
// the target's status may not count yet (in flight), and of the Workloads
// that found no room and wait for it (the waiting line, line.go), with the
// adaptive depth of each target's own queue (depth.go). It is pure: the
// dispatch controller feeds it from its watches and decides under its lock
// (Decide), and it makes no API call.
package inflight

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/placement"
	"github.com/trainyard-dev/trainyard/internal/metrics"
)

// Record is the hub's one record of the GPUs sent to each target that
// its heartbeat may not count yet. The Dispatch watch keeps it current
// (Observe, Forget), so a decision reads only the live Dispatches of the
// targets it weighs, never the whole history. A decision books its GPUs
// here (Decide, Tx.Book) before the Dispatch is written, so concurrent workers
// never book the same GPUs; the watch replaces the booking with the
// Dispatch itself once it shows it.
//
// The same lock guards the Workloads that found no room (waiting): a
// decision that fails records its Workload under the lock it chose under
// (Tx.Wait),
// and every event that frees room wakes the waiting under that lock, so
// no wake-up falls between a decision and its record.
//
// A wake-up is sized to the room: it wakes, in priority and then arrival
// order, the waiting Workloads a target could take by the GPUs its last
// status shows free less those in flight (and its free places in its own
// queue), and always the first in line. Ten thousand waiting jobs cost one
// pass each per job that can start, not one per freed GPU each.
//
// The GPUs a wake-up offers are promised to those it woke until their next
// try (or promiseTTL): a job admitted meanwhile, or one behind them in line,
// counts them as taken, so room that frees goes to the line in its order
// rather than to whichever pass runs first.
type Record struct {
	mu sync.Mutex
	// byTarget holds, per target, each Dispatch (by namespace/name) that
	// may hold GPUs there: booked, or watched and not yet final.
	byTarget map[string]map[string]flight
	waiting  map[types.NamespacedName]waiter
	// line is the waiting in line order, kept sorted as they join and
	// leave: a wake-up reads it from the head and stops when the room is
	// given away, instead of sorting ten thousand waiters each time.
	line []Place
	// targets is each Target as the hub's watch last showed it: how much
	// room a wake-up has to give away.
	targets map[string]*v1alpha1.Target
	// promised holds, per target, the GPUs its wake-ups offered to waiting
	// Workloads that have not tried again yet.
	promised map[string]map[types.NamespacedName]promise
	// gauges time, per target, the starts and refills its adaptive queue
	// depth reads (depth.go).
	gauges map[string]*depthGauge
	now    func() time.Time
}

// flight is one Dispatch's claim on a target. A booked claim (not yet
// seen by the watch) carries its reservations; a watched one carries the
// fields inFlightOn and reservationsOf read (Observe copies exactly those:
// one left out silently changes what counts as in flight).
type flight struct {
	workload types.UID
	gpus     int64
	booked   bool
	// queued: sent beyond what the target had free, to wait in its own
	// queue (AnnotationQueued); it holds a place of the target's queue
	// depth until it starts.
	queued bool
	at     time.Time
	nodes  []placement.Reservation
	d      *v1alpha1.Dispatch
}

// started reports whether the flight's remote work has begun: a booked
// one has not, a watched one once its Dispatch is Running.
func (fl flight) started() bool {
	return !fl.booked && fl.d.Status.Phase == v1alpha1.DispatchRunning
}

// waitsInQueue reports whether the flight holds a place in its target's
// queue.
func (fl flight) waitsInQueue() bool { return fl.queued && !fl.started() }

// bookingTTL bounds how long a booking waits for the watch; a watch is
// seconds behind at worst, so a booking this old belongs to a Dispatch
// whose create failed in a way that left no answer.
const bookingTTL = time.Minute

// New returns an empty Record that reads the time from now.
func New(now func() time.Time) *Record {
	return &Record{byTarget: map[string]map[string]flight{}, waiting: map[types.NamespacedName]waiter{},
		targets: map[string]*v1alpha1.Target{}, promised: map[string]map[types.NamespacedName]promise{},
		gauges: map[string]*depthGauge{}, now: now}
}

// Key is the key the record holds a Dispatch under: its namespace/name.
func Key(namespace, name string) string { return namespace + "/" + name }

// mayHoldGPUs reports whether d can count against its target at all:
// finished, rejected and deleted Dispatches never do.
func mayHoldGPUs(d *v1alpha1.Dispatch) bool {
	if !d.DeletionTimestamp.IsZero() {
		return false
	}
	switch d.Status.Phase {
	case "", v1alpha1.DispatchPending, v1alpha1.DispatchSubmitted, v1alpha1.DispatchRunning:
		return true
	}
	return false
}

// Observe records what the watch shows of d. It returns the Workloads to
// wake: the waiting ones when d stopped holding GPUs, gave back its place
// in its target's queue, or started at a pace that deepens that queue.
func (f *Record) Observe(d *v1alpha1.Dispatch, gpus int64) []reconcile.Request {
	if !mayHoldGPUs(d) {
		return f.Forget(d)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	key := Key(d.Namespace, d.Name)
	on := f.byTarget[d.Spec.TargetName]
	if on == nil {
		on = map[string]flight{}
		f.byTarget[d.Spec.TargetName] = on
	}
	slim := &v1alpha1.Dispatch{}
	slim.DeletionTimestamp = d.DeletionTimestamp
	slim.Status.Phase, slim.Status.StartTime = d.Status.Phase, d.Status.StartTime
	slim.Status.CountedFromReading = d.Status.CountedFromReading
	slim.Spec.PodSets = d.Spec.PodSets
	prev, seen := on[key]
	now, t := f.now(), f.targets[d.Spec.TargetName]
	// The booking's time stays with the flight, to time the refill.
	fl := flight{workload: d.Spec.Workload.UID, gpus: gpus, queued: d.Annotations[v1alpha1.AnnotationQueued] == "true", d: slim, at: prev.at}
	on[key] = fl
	var depth int32
	if t != nil {
		depth = f.depthLocked(t, now)
	}
	started := f.timeRefillLocked(t, prev, seen, fl, now)
	switch {
	case seen && prev.waitsInQueue() && !fl.waitsInQueue(), started && f.depthLocked(t, now) > depth:
		return f.wakeForLocked(d.Spec.TargetName)
	case t != nil && t.QueueDepth() > 0 && seen && prev.unsettledOn(t) && !fl.unsettledOn(t):
		// It settled (the target's last reading counts it, as the record
		// does): the jobs it kept out of the target's queue may go. Only
		// this flight changed, so unsettledLocked fell exactly when it
		// stopped counting there; asking it alone keeps each watch event
		// O(1) on a target with thousands in flight. A start
		// the reading has not counted yet changes nothing; the reading that
		// counts it wakes them (RecordTarget).
		return f.wakeForLocked(d.Spec.TargetName)
	}
	return nil
}

// Forget drops d (deleted, or done holding GPUs) and wakes the waiting
// when it held any.
func (f *Record) Forget(d *v1alpha1.Dispatch) []reconcile.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := Key(d.Namespace, d.Name)
	on := f.byTarget[d.Spec.TargetName]
	if _, ok := on[key]; !ok {
		return nil
	}
	delete(on, key)
	if len(on) == 0 {
		delete(f.byTarget, d.Spec.TargetName)
		// Nothing of the hub's runs there any more: no wave of its jobs
		// can end together, so past starts no longer deepen the queue.
		if g := f.gauges[d.Spec.TargetName]; g != nil {
			g.starts = nil
		}
	}
	return f.wakeForLocked(d.Spec.TargetName)
}

// onTargetLocked returns the GPUs in flight to target and those booked on
// known nodes; reported (its status) and nodeLevel are the target's. Stale
// bookings are dropped. The caller holds mu.
func (f *Record) onTargetLocked(target string, reported *v1alpha1.TargetStatus, nodeLevel string, now time.Time) (int64, []placement.Reservation) {
	var gpus int64
	var nodes []placement.Reservation
	for key, fl := range f.byTarget[target] {
		switch {
		case fl.booked && now.Sub(fl.at) > bookingTTL:
			delete(f.byTarget[target], key)
		case fl.booked:
			gpus += fl.gpus
			nodes = append(nodes, fl.nodes...)
		case inFlightOn(fl.d, reported):
			gpus += fl.gpus
			nodes = append(nodes, reservationsOf(fl.d, fl.gpus, nodeLevel)...)
		}
	}
	return gpus, nodes
}

// queuedLocked counts the flights to target that hold a place in its
// queue. The caller holds mu.
func (f *Record) queuedLocked(target string) int32 {
	var n int32
	for _, fl := range f.byTarget[target] {
		if fl.waitsInQueue() {
			n++
		}
	}
	return n
}

// unsettledLocked counts the flights to a Kubernetes spoke t sent to fit
// now that t's last reading may count twice: until every pod of one runs,
// the reading counts those bound while the record counts them all, and a
// job seen running after the reading began is counted by the record while
// the reading may already count its bound pods. Either way t's room may be
// larger than it looks, so no job is queued there until the next reading
// settles them (RecordTarget wakes the line then). A Slurm job's
// allocation is whole: none on another target. The caller holds mu.
func (f *Record) unsettledLocked(t *v1alpha1.Target) int32 {
	var n int32
	for _, fl := range f.byTarget[t.Name] {
		if fl.unsettledOn(t) {
			n++
		}
	}
	return n
}

// unsettledOn reports whether unsettledLocked counts fl on t.
func (fl flight) unsettledOn(t *v1alpha1.Target) bool {
	return t.Spec.Type == v1alpha1.TargetTypeKubernetes && !fl.queued && (fl.booked || inFlightOn(fl.d, &t.Status))
}

// bookLocked books a decision's GPUs under the Dispatch's key before it is
// written; queued says it goes to wait in the target's queue. The caller
// holds mu.
func (f *Record) bookLocked(key, target string, wl types.UID, wlKey types.NamespacedName, gpus int64,
	nodes []placement.Reservation, queued bool, now time.Time) {
	on := f.byTarget[target]
	if on == nil {
		on = map[string]flight{}
		f.byTarget[target] = on
	}
	on[key] = flight{workload: wl, gpus: gpus, booked: true, queued: queued, at: now, nodes: nodes}
	f.leaveLineLocked(wlKey)
}

// Unbook gives a booking back after its Dispatch was not written; what the
// watch has shown under the key stays.
func (f *Record) Unbook(key, target string) []reconcile.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl, ok := f.byTarget[target][key]; !ok || !fl.booked {
		return nil
	}
	delete(f.byTarget[target], key)
	return f.wakeForLocked(target)
}

// Booked reports whether a Dispatch of wl is booked and not yet shown by
// the watch: the cache does not show it, and a new attempt must wait.
func (f *Record) Booked(wl types.UID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, on := range f.byTarget {
		for _, fl := range on {
			if fl.booked && fl.workload == wl {
				return true
			}
		}
	}
	return false
}

// Counts is what the record holds, for the hub's gauges: per target the
// Dispatches not yet running (booked, Pending or Submitted), those of
// them waiting in the target's own queue and the depth of that queue, and
// the Workloads waiting for room.
func (f *Record) Counts() metrics.FlightCounts {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := metrics.FlightCounts{InFlight: map[string]int{}, Queued: map[string]int{}, QueueLimit: map[string]int{}}
	now := f.now()
	for name, t := range f.targets {
		if d := f.depthLocked(t, now); d > 0 {
			c.QueueLimit[name] = int(d)
		}
	}
	for _, w := range f.waiting {
		c.Waiting = append(c.Waiting, metrics.WaitingJob{Flavors: w.flavors, QueueFlavors: w.queue, Since: w.waitedFrom})
	}
	for target, on := range f.byTarget {
		for _, fl := range on {
			if !fl.booked && fl.d.Status.Phase == v1alpha1.DispatchRunning {
				continue
			}
			c.InFlight[target]++
			if fl.queued {
				c.Queued[target]++
			}
		}
	}
	return c
}

// size is the number of Dispatches counted, for tests and the benchmark.
func (f *Record) size() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, on := range f.byTarget {
		n += len(on)
	}
	return n
}

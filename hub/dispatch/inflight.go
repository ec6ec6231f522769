package dispatch

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/placement"
	"github.com/trainyard-dev/trainyard/internal/metrics"
)

// inflight is the hub's one record of the GPUs sent to each target that
// its heartbeat may not count yet. The Dispatch watch keeps it current
// (observe, forget), so a decision reads only the live Dispatches of the
// targets it weighs, never the whole history. A decision books its GPUs
// here (reserve) before the Dispatch is written, so concurrent workers
// never book the same GPUs; the watch replaces the booking with the
// Dispatch itself once it shows it.
//
// The same lock guards the Workloads that found no room (waiting): a
// decision that fails records its Workload under the lock it chose under,
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
type inflight struct {
	mu sync.Mutex
	// byTarget holds, per target, each Dispatch (by namespace/name) that
	// may hold GPUs there: booked, or watched and not yet final.
	byTarget map[string]map[string]flight
	waiting  map[types.NamespacedName]waiter
	// line is the waiting in line order, kept sorted as they join and
	// leave: a wake-up reads it from the head and stops when the room is
	// given away, instead of sorting ten thousand waiters each time.
	line []place
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

// promise is room a wake-up offered a waiting Workload on one target.
type promise struct {
	place
	gpus int64
	at   time.Time
}

// promiseTTL bounds a promise whose Workload never tried again (its pass
// was dropped, or it left the line another way).
const promiseTTL = time.Minute

// place is a Workload's place in the waiting line: higher priority first,
// then earlier creation, then namespace and name so that the order is
// total.
type place struct {
	key      types.NamespacedName
	priority int32
	since    time.Time
}

func (a place) compare(b place) int {
	if a.priority != b.priority {
		return cmp.Compare(b.priority, a.priority)
	}
	if c := a.since.Compare(b.since); c != 0 {
		return c
	}
	if c := cmp.Compare(a.key.Namespace, b.key.Namespace); c != 0 {
		return c
	}
	return cmp.Compare(a.key.Name, b.key.Name)
}

// placeOf is w's place in line under key.
func (w waiter) placeOf(key types.NamespacedName) place {
	return place{key: key, priority: w.priority, since: w.since}
}

// waiter is a Workload that found no room, with what a wake-up reads: the
// GPUs it needs, the flavors it was admitted with and those of its
// ClusterQueue (which bound a flavor-less job), the targets that could
// never run it (at the generation they were judged at), and its place in
// line. woken: a wake-up offered it room since it last failed; until
// then its passes do not try again.
type waiter struct {
	gpus       int64
	flavors    []string
	queue      []string
	ineligible map[string]int64
	priority   int32
	since      time.Time
	woken      bool
	// waitedFrom is when it first found no room, for the queue gauges.
	waitedFrom time.Time
}

// wants reports whether room on t may let w start. A target judged
// ineligible at another spec is asked again.
func (w waiter) wants(t *v1alpha1.Target) bool {
	gen, judged := w.ineligible[t.Name]
	return (!judged || gen != t.Generation) && t.Serves(w.flavors, w.queue)
}

// flight is one Dispatch's claim on a target. A booked claim (not yet
// seen by the watch) carries its reservations; a watched one carries the
// fields inFlightOn and reservationsOf read (observe copies exactly those:
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

func newInflight() *inflight {
	return &inflight{byTarget: map[string]map[string]flight{}, waiting: map[types.NamespacedName]waiter{},
		targets: map[string]*v1alpha1.Target{}, promised: map[string]map[types.NamespacedName]promise{},
		gauges: map[string]*depthGauge{}, now: time.Now}
}

func keyOf(namespace, name string) string { return namespace + "/" + name }

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

// observe records what the watch shows of d. It returns the Workloads to
// wake: the waiting ones when d stopped holding GPUs, gave back its place
// in its target's queue, or started at a pace that deepens that queue.
func (f *inflight) observe(d *v1alpha1.Dispatch, gpus int64) []reconcile.Request {
	if !mayHoldGPUs(d) {
		return f.forget(d)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	key := keyOf(d.Namespace, d.Name)
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
	// The booking's time stays with the flight, to time the refill.
	fl := flight{workload: d.Spec.Workload.UID, gpus: gpus, queued: d.Annotations[v1alpha1.AnnotationQueued] == "true", d: slim, at: prev.at}
	on[key] = fl
	now, t := f.now(), f.targets[d.Spec.TargetName]
	var depth int32
	if t != nil {
		depth = f.depthLocked(t, now)
	}
	started := f.timeRefillLocked(t, prev, seen, fl, now)
	switch {
	case seen && prev.waitsInQueue() && !fl.waitsInQueue(), started && f.depthLocked(t, now) > depth:
		return f.wakeForLocked(d.Spec.TargetName)
	case seen && !fl.queued && !prev.started() && fl.started() && t != nil && t.QueueDepth() > 0:
		// It settled: the jobs it kept out of the target's queue may go.
		return f.wakeForLocked(d.Spec.TargetName)
	}
	return nil
}

// forget drops d (deleted, or done holding GPUs) and wakes the waiting
// when it held any.
func (f *inflight) forget(d *v1alpha1.Dispatch) []reconcile.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := keyOf(d.Namespace, d.Name)
	on := f.byTarget[d.Spec.TargetName]
	if _, ok := on[key]; !ok {
		return nil
	}
	delete(on, key)
	if len(on) == 0 {
		delete(f.byTarget, d.Spec.TargetName)
	}
	return f.wakeForLocked(d.Spec.TargetName)
}

// onTargetLocked returns the GPUs in flight to target and those booked on
// known nodes; reported (its status) and nodeLevel are the target's. Stale
// bookings are dropped. The caller holds mu.
func (f *inflight) onTargetLocked(target string, reported *v1alpha1.TargetStatus, nodeLevel string, now time.Time) (int64, []placement.Reservation) {
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
func (f *inflight) queuedLocked(target string) int32 {
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
// settles them (recordTarget wakes the line then). A Slurm job's
// allocation is whole: none on another target. The caller holds mu.
func (f *inflight) unsettledLocked(t *v1alpha1.Target) int32 {
	if t.Spec.Type != v1alpha1.TargetTypeKubernetes {
		return 0
	}
	var n int32
	for _, fl := range f.byTarget[t.Name] {
		if !fl.queued && (fl.booked || inFlightOn(fl.d, &t.Status)) {
			n++
		}
	}
	return n
}

// bookLocked books a decision's GPUs under the Dispatch's key before it is
// written; queued says it goes to wait in the target's queue. The caller
// holds mu.
func (f *inflight) bookLocked(key, target string, wl types.UID, wlKey types.NamespacedName, gpus int64,
	nodes []placement.Reservation, queued bool, now time.Time) {
	on := f.byTarget[target]
	if on == nil {
		on = map[string]flight{}
		f.byTarget[target] = on
	}
	on[key] = flight{workload: wl, gpus: gpus, booked: true, queued: queued, at: now, nodes: nodes}
	f.leaveLineLocked(wlKey)
}

// leaveLineLocked forgets wl's wait and the room promised to it. The
// caller holds mu.
func (f *inflight) leaveLineLocked(wl types.NamespacedName) {
	if w, ok := f.waiting[wl]; ok {
		f.unqueueLocked(w.placeOf(wl))
		delete(f.waiting, wl)
	}
	f.dropPromisesLocked(wl)
}

// enqueueLocked and unqueueLocked keep line sorted. The caller holds mu.
func (f *inflight) enqueueLocked(p place) {
	if i, found := slices.BinarySearchFunc(f.line, p, place.compare); !found {
		f.line = slices.Insert(f.line, i, p)
	}
}

func (f *inflight) unqueueLocked(p place) {
	if i, found := slices.BinarySearchFunc(f.line, p, place.compare); found {
		f.line = slices.Delete(f.line, i, i+1)
	}
}

func (f *inflight) dropPromisesLocked(wl types.NamespacedName) {
	for target, on := range f.promised {
		delete(on, wl)
		if len(on) == 0 {
			delete(f.promised, target)
		}
	}
}

// promisedAheadLocked is the GPUs on target promised to Workloads ahead of
// me in line, which a decision for me must leave them. Lapsed promises are
// dropped. The caller holds mu.
func (f *inflight) promisedAheadLocked(target string, me place, now time.Time) int64 {
	var gpus int64
	for key, p := range f.promised[target] {
		switch {
		case now.Sub(p.at) > promiseTTL:
			delete(f.promised[target], key)
		case key != me.key && p.compare(me) < 0:
			gpus += p.gpus
		}
	}
	return gpus
}

// unbook gives a booking back after its Dispatch was not written; what the
// watch has shown under the key stays.
func (f *inflight) unbook(key, target string) []reconcile.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl, ok := f.byTarget[target][key]; !ok || !fl.booked {
		return nil
	}
	delete(f.byTarget[target], key)
	return f.wakeForLocked(target)
}

// booked reports whether a Dispatch of wl is booked and not yet shown by
// the watch: the cache does not show it, and a new attempt must wait.
func (f *inflight) booked(wl types.UID) bool {
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

// waitLocked records a Workload that found no room. A Workload already
// waiting keeps its place; the room promised to it is free again, for the
// next wake-up to offer. The caller holds mu.
func (f *inflight) waitLocked(wl types.NamespacedName, w waiter) {
	f.dropPromisesLocked(wl)
	w.waitedFrom = f.now()
	if prev, ok := f.waiting[wl]; ok {
		w.waitedFrom = prev.waitedFrom
		if !prev.since.IsZero() && prev.since.Before(w.since) {
			w.since = prev.since
		}
		f.unqueueLocked(prev.placeOf(wl))
	}
	f.waiting[wl] = w
	f.enqueueLocked(w.placeOf(wl))
}

// asleep reports whether wl waits for room and no wake-up has offered it
// any since it last failed.
func (f *inflight) asleep(wl types.NamespacedName) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	w, ok := f.waiting[wl]
	return ok && !w.woken
}

// stopWaiting forgets a Workload that no longer waits for room.
func (f *inflight) stopWaiting(wl types.NamespacedName) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leaveLineLocked(wl)
}

// noteTarget records t as the watch shows it and returns the waiting
// Workloads its room may start.
func (f *inflight) noteTarget(t *v1alpha1.Target) []reconcile.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.targets[t.Name] = t
	return f.wakeForLocked(t.Name)
}

// recordTarget records t as the watch shows it. It wakes the waiting
// only when this reading settles flights the last one left unsettled
// (unsettledLocked): the jobs they kept out of t's queue may go.
func (f *inflight) recordTarget(t *v1alpha1.Target) []reconcile.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.targets[t.Name]
	f.targets[t.Name] = t
	if old != nil && t.QueueDepth() > 0 && f.unsettledLocked(t) < f.unsettledLocked(old) {
		return f.wakeForLocked(t.Name)
	}
	return nil
}

// forgetTarget drops a deleted Target and wakes every Workload waiting
// for room on it: it may now have nowhere to go, which its next pass says.
func (f *inflight) forgetTarget(t *v1alpha1.Target) []reconcile.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.targets, t.Name)
	delete(f.gauges, t.Name)
	return f.wakeWantingLocked(t)
}

// wakeWanting wakes every Workload waiting for room on t as it was, room
// or not: t no longer serves them as it did (its spec changed).
func (f *inflight) wakeWanting(t *v1alpha1.Target) []reconcile.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.wakeWantingLocked(t)
}

func (f *inflight) wakeWantingLocked(t *v1alpha1.Target) []reconcile.Request {
	var out []reconcile.Request
	for key, w := range f.waiting {
		if w.wants(t) {
			w.woken = true
			f.waiting[key] = w
			out = append(out, reconcile.Request{NamespacedName: key})
		}
	}
	return out
}

// sweep wakes, on every known target, whom its room may start: the
// periodic guard against a wake-up an estimate missed.
func (f *inflight) sweep() []reconcile.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []reconcile.Request
	for name := range f.targets {
		out = append(out, f.wakeForLocked(name)...)
	}
	return out
}

// wakeForLocked returns the waiting Workloads room on target may start:
// in line order, those whose GPUs fit what the target's last status shows
// free less what is in flight there, then as many as it has free places
// in its own queue, and always the first in line, so an estimate that
// falls short never stops the line. The caller holds mu.
func (f *inflight) wakeForLocked(target string) []reconcile.Request {
	t := f.targets[target]
	if t == nil || len(f.waiting) == 0 {
		return nil
	}
	now := f.now()
	inFlight, _ := f.onTargetLocked(target, &t.Status, nodeLevelOf(t), now)
	room, places := t.Status.FreeGPUs-inFlight, f.depthLocked(t, now)-f.queuedLocked(target)
	// The line is offered this target's room afresh: earlier offers on it
	// are replaced by this one's.
	delete(f.promised, target)
	var out []reconcile.Request
	for _, p := range f.line {
		w := f.waiting[p.key]
		if !w.wants(t) {
			continue
		}
		switch {
		case w.gpus <= room:
			room -= w.gpus
			f.promiseLocked(target, promise{place: p, gpus: w.gpus, at: now})
		case places > 0:
			places--
		case len(out) > 0:
			continue
		}
		w.woken = true
		f.waiting[p.key] = w
		out = append(out, reconcile.Request{NamespacedName: p.key})
		if room <= 0 && places <= 0 {
			break
		}
	}
	return out
}

func (f *inflight) promiseLocked(target string, p promise) {
	on := f.promised[target]
	if on == nil {
		on = map[types.NamespacedName]promise{}
		f.promised[target] = on
	}
	on[p.key] = p
}

// counts is what the record holds, for the hub's gauges: per target the
// Dispatches not yet running (booked, Pending or Submitted), those of
// them waiting in the target's own queue and the depth of that queue, and
// the Workloads waiting for room.
func (f *inflight) counts() metrics.FlightCounts {
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
func (f *inflight) size() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, on := range f.byTarget {
		n += len(on)
	}
	return n
}

package inflight

import (
	"cmp"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// The waiting line: the Workloads that found no room, in the order room
// goes to them, and the wake-ups that offer them room (see Record).

// promise is room a wake-up offered a waiting Workload on one target.
type promise struct {
	Place
	gpus int64
	at   time.Time
}

// promiseTTL bounds a promise whose Workload never tried again (its pass
// was dropped, or it left the line another way).
const promiseTTL = time.Minute

// Place is a Workload's place in the waiting line: higher priority first,
// then earlier creation, then namespace and name so that the order is
// total.
type Place struct {
	Key      types.NamespacedName
	Priority int32
	// Since is the Workload's creation.
	Since time.Time
}

func (a Place) compare(b Place) int {
	if a.Priority != b.Priority {
		return cmp.Compare(b.Priority, a.Priority)
	}
	if c := a.Since.Compare(b.Since); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Key.Namespace, b.Key.Namespace); c != 0 {
		return c
	}
	return cmp.Compare(a.Key.Name, b.Key.Name)
}

// placeOf is w's place in line under key.
func (w waiter) placeOf(key types.NamespacedName) Place {
	return Place{Key: key, Priority: w.priority, Since: w.since}
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

// leaveLineLocked forgets wl's wait and the room promised to it. The
// caller holds mu.
func (f *Record) leaveLineLocked(wl types.NamespacedName) {
	if w, ok := f.waiting[wl]; ok {
		f.unqueueLocked(w.placeOf(wl))
		delete(f.waiting, wl)
	}
	f.dropPromisesLocked(wl)
}

// enqueueLocked and unqueueLocked keep line sorted. The caller holds mu.
func (f *Record) enqueueLocked(p Place) {
	if i, found := slices.BinarySearchFunc(f.line, p, Place.compare); !found {
		f.line = slices.Insert(f.line, i, p)
	}
}

func (f *Record) unqueueLocked(p Place) {
	if i, found := slices.BinarySearchFunc(f.line, p, Place.compare); found {
		f.line = slices.Delete(f.line, i, i+1)
	}
}

func (f *Record) dropPromisesLocked(wl types.NamespacedName) {
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
func (f *Record) promisedAheadLocked(target string, me Place, now time.Time) int64 {
	var gpus int64
	for key, p := range f.promised[target] {
		switch {
		case now.Sub(p.at) > promiseTTL:
			delete(f.promised[target], key)
		case key != me.Key && p.compare(me) < 0:
			gpus += p.gpus
		}
	}
	return gpus
}

// waitLocked records a Workload that found no room. A Workload already
// waiting keeps its place; the room promised to it is free again, for the
// next wake-up to offer. The caller holds mu.
func (f *Record) waitLocked(wl types.NamespacedName, w waiter) {
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

// Asleep reports whether wl waits for room and no wake-up has offered it
// any since it last failed.
func (f *Record) Asleep(wl types.NamespacedName) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	w, ok := f.waiting[wl]
	return ok && !w.woken
}

// StopWaiting forgets a Workload that no longer waits for room.
func (f *Record) StopWaiting(wl types.NamespacedName) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leaveLineLocked(wl)
}

// NoteTarget records t as the watch shows it and returns the waiting
// Workloads its room may start.
func (f *Record) NoteTarget(t *v1alpha1.Target) []reconcile.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.targets[t.Name] = t
	return f.wakeForLocked(t.Name)
}

// RecordTarget records t as the watch shows it. It wakes the waiting
// only when this reading settles flights the last one left unsettled
// (unsettledLocked): the jobs they kept out of t's queue may go.
func (f *Record) RecordTarget(t *v1alpha1.Target) []reconcile.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.targets[t.Name]
	f.targets[t.Name] = t
	if old != nil && t.QueueDepth() > 0 && f.unsettledLocked(t) < f.unsettledLocked(old) {
		return f.wakeForLocked(t.Name)
	}
	return nil
}

// ForgetTarget drops a deleted Target and wakes every Workload waiting
// for room on it: it may now have nowhere to go, which its next pass says.
func (f *Record) ForgetTarget(t *v1alpha1.Target) []reconcile.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.targets, t.Name)
	delete(f.gauges, t.Name)
	return f.wakeWantingLocked(t)
}

// WakeWanting wakes every Workload waiting for room on t as it was, room
// or not: t no longer serves them as it did (its spec changed).
func (f *Record) WakeWanting(t *v1alpha1.Target) []reconcile.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.wakeWantingLocked(t)
}

func (f *Record) wakeWantingLocked(t *v1alpha1.Target) []reconcile.Request {
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

// Sweep wakes, on every known target, whom its room may start: the
// periodic guard against a wake-up an estimate missed.
func (f *Record) Sweep() []reconcile.Request {
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
func (f *Record) wakeForLocked(target string) []reconcile.Request {
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
		w := f.waiting[p.Key]
		if !w.wants(t) {
			continue
		}
		switch {
		case w.gpus <= room:
			room -= w.gpus
			f.promiseLocked(target, promise{Place: p, gpus: w.gpus, at: now})
		case places > 0:
			places--
		case len(out) > 0:
			continue
		}
		w.woken = true
		f.waiting[p.Key] = w
		out = append(out, reconcile.Request{NamespacedName: p.Key})
		if room <= 0 && places <= 0 {
			break
		}
	}
	return out
}

func (f *Record) promiseLocked(target string, p promise) {
	on := f.promised[target]
	if on == nil {
		on = map[types.NamespacedName]promise{}
		f.promised[target] = on
	}
	on[p.Key] = p
}

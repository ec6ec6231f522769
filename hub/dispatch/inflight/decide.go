package inflight

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/placement"
)

// Decide runs one placement decision under the record's lock and returns
// what decide returns. decide weighs each target through tx.Candidate and
// then either books the job (tx.Book) or records it as waiting (tx.Wait),
// so concurrent decisions never book the same GPUs and no wake-up falls
// between a decision that found no room and its record. decide reads the
// cache only and makes no API call: the watches and every other decision
// wait on the same lock.
func (f *Record) Decide(decide func(tx *Tx) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return decide(&Tx{f: f, now: f.now()})
}

// Tx is the record as one decision sees it, valid only inside Decide.
type Tx struct {
	f   *Record
	now time.Time
}

// Candidate is target t as placement weighs it for the Workload at place
// me: its status, less the GPUs in flight there and the room wake-ups
// promised to those ahead of me in line, with its queue's depth and
// places taken. ineligible says why t could never run the job, if so.
func (tx *Tx) Candidate(t *v1alpha1.Target, me Place, ineligible string) placement.Candidate {
	f, now := tx.f, tx.now
	gpus, nodes := f.onTargetLocked(t.Name, &t.Status, nodeLevelOf(t), now)
	// Room a wake-up offered those ahead in line is theirs.
	gpus += f.promisedAheadLocked(t.Name, me, now)
	return placement.Candidate{Target: t, InFlightGPUs: gpus, InFlight: nodes,
		Ineligible: ineligible, Queued: f.queuedLocked(t.Name), Unsettled: f.unsettledLocked(t),
		QueueDepth: f.depthLocked(t, now)}
}

// Need is what a Workload that found no room waits for: the GPUs it
// needs, the flavors it was admitted with and those of its ClusterQueue
// (which bound a flavor-less job), and the targets that could never run
// it, at the generation they were judged at.
type Need struct {
	GPUs         int64
	Flavors      []string
	QueueFlavors []string
	Ineligible   map[string]int64
}

// Wait records the Workload at place me as waiting for room. A Workload
// already waiting keeps its place; the room promised to it is free again,
// for the next wake-up to offer.
func (tx *Tx) Wait(me Place, n Need) {
	tx.f.waitLocked(me.Key, waiter{gpus: n.GPUs, flavors: n.Flavors, queue: n.QueueFlavors,
		ineligible: n.Ineligible, priority: me.Priority, since: me.Since})
}

// Booking is a decision's claim on a target before its Dispatch is
// written.
type Booking struct {
	// Key is the Dispatch's (Key).
	Key    string
	Target string
	// Workload and WorkloadKey are the Workload's UID and namespace/name.
	Workload    types.UID
	WorkloadKey types.NamespacedName
	GPUs        int64
	// Nodes are the GPUs booked on known nodes.
	Nodes []placement.Reservation
	// Queued: the Dispatch goes to wait in the target's own queue.
	Queued bool
}

// Book books b's GPUs, until the watch shows its Dispatch or Unbook gives
// them back, and takes its Workload out of the waiting line.
func (tx *Tx) Book(b Booking) {
	tx.f.bookLocked(b.Key, b.Target, b.Workload, b.WorkloadKey, b.GPUs, b.Nodes, b.Queued, tx.now)
}

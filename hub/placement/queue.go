package placement

import (
	"cmp"
	"strings"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// queueOn sends a job that fits nowhere now to wait in the queue of one of
// the candidates, when one takes queued jobs (a queue depth above 0) and
// has room left in its queue: the one with the most room left, then by
// name. Candidates here are available, eligible and serve the job's
// flavors, and the job is known to fit them some day.
//
// A job bound to one topology domain is never queued: the hub cannot tell
// which domain frees first, and the cluster's scheduler would not keep
// the job inside one. Neither is a job the target's nodes could never hold
// (larger pods than its largest node, more pods than it has nodes), nor a
// job of several pods on a Kubernetes spoke, whose scheduler binds pods
// one at a time: two half-bound jobs would hold each other's GPUs. While
// a candidate's room is unsettled (Candidate.Unsettled), the job waits on
// the hub instead: "no room" may be a double count.
func queueOn(req Request, candidates []Candidate) (Decision, bool) {
	for _, ps := range req.PodSets {
		if ps.Required != "" && ps.Count > 0 {
			return Decision{}, false
		}
	}
	for _, c := range candidates {
		if c.Unsettled > 0 {
			return Decision{}, false
		}
	}
	var best *Candidate
	room := func(c *Candidate) int32 { return c.queueDepth() - c.Queued }
	for i := range candidates {
		c := &candidates[i]
		if room(c) <= 0 || !couldHold(req, c) || !takesQueued(req, c.Target) {
			continue
		}
		if best == nil || cmp.Or(cmp.Compare(room(best), room(c)), strings.Compare(c.Target.Name, best.Target.Name)) < 0 {
			best = c
		}
	}
	if best == nil {
		return Decision{}, false
	}
	return Decision{Target: best.Target.Name, Queued: true,
		FreeAfter: best.Target.Status.FreeGPUs - totalInFlight(*best) - req.GPUs()}, true
}

// takesQueued reports whether t's own scheduler may hold the job while it
// waits: any job on a Slurm cluster (an allocation is all or nothing), a
// job of one pod on a Kubernetes spoke.
func takesQueued(req Request, t *v1alpha1.Target) bool {
	if t.Spec.Type != v1alpha1.TargetTypeKubernetes {
		return true
	}
	return req.pods() <= 1
}

// queueDepth is how many jobs c may hold in its queue: its Target's
// depth, or the deeper one the hub chose for this decision.
func (c *Candidate) queueDepth() int32 {
	if d := c.Target.QueueDepth(); d == 0 || c.QueueDepth < d {
		return d
	}
	return c.QueueDepth
}

// couldHold reports whether c's nodes, all free, could run the job: each
// pod on a node large enough, and on a Slurm cluster (a node per pod)
// enough nodes for its pods. A target that has not published its node
// size or nodes is not held to them.
func couldHold(req Request, c *Candidate) bool {
	t := c.Target
	if n := t.Status.MaxGPUsPerNode; n > 0 && maxPodGPUs(req) > n {
		return false
	}
	if t.Status.Topology == nil {
		return true
	}
	nodes := 0
	for _, d := range t.Status.Topology.Domains {
		nodes += len(d.FreeGPUsPerNode)
	}
	return nodes == 0 || t.Spec.Type != v1alpha1.TargetTypeSlurm || int(req.pods()) <= nodes
}

// pods is how many pods the job runs, over all its pod sets.
func (req Request) pods() int32 {
	var n int32
	for _, ps := range req.PodSets {
		n += max(ps.Count, 0)
	}
	return n
}

package inflight

import (
	"slices"
	"strings"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/placement"
)

// What of a Dispatch's GPUs its target's status may not count yet, and on
// which nodes.

// reservationsOf reads the nodes a Dispatch's pinned pods were assigned
// to. Pods of unpinned pod sets may land anywhere, so their GPUs stay
// unattributed (the caller books them pessimistically). Dispatches written
// before pod sets recorded their GPUs per pod are read by their total when
// they have one pod set.
func reservationsOf(d *v1alpha1.Dispatch, gpus int64, nodeLevel string) []placement.Reservation {
	if nodeLevel == "" {
		return nil
	}
	byNode := map[string]int64{}
	for _, ps := range d.Spec.PodSets {
		perPod := ps.GPUsPerPod
		if perPod == 0 && len(d.Spec.PodSets) == 1 && ps.Count > 0 {
			perPod = gpus / int64(ps.Count)
		}
		for _, r := range placement.ReservationsOf(ps.Topology, perPod, nodeLevel) {
			byNode[r.Node] += r.GPUs
		}
	}
	out := make([]placement.Reservation, 0, len(byNode))
	for node, n := range byNode {
		out = append(out, placement.Reservation{Node: node, GPUs: n})
	}
	slices.SortFunc(out, func(a, b placement.Reservation) int { return strings.Compare(a.Node, b.Node) })
	if len(out) == 0 {
		return nil
	}
	return out
}

// inFlightOn reports whether d's GPUs may be missing from its target's
// last reported capacity (target): until the remote runs its pods may be
// unbound, and the heartbeat counts bound pods only; once running, a
// reading that began before the agent saw it running has not counted it
// either. The agent numbers both (countedFromReading); without numbers a
// heartbeat later than the start is taken to count it.
func inFlightOn(d *v1alpha1.Dispatch, target *v1alpha1.TargetStatus) bool {
	if !d.DeletionTimestamp.IsZero() {
		return false
	}
	switch d.Status.Phase {
	case "", v1alpha1.DispatchPending, v1alpha1.DispatchSubmitted:
		return true
	case v1alpha1.DispatchRunning:
		if d.Status.CountedFromReading > 0 {
			return target.CapacityReading < d.Status.CountedFromReading
		}
		return d.Status.StartTime == nil || target.LastHeartbeatTime == nil ||
			!target.LastHeartbeatTime.After(d.Status.StartTime.Time)
	}
	return false
}

// nodeLevelOf is the finest level of t's topology, the one its nodes are
// named at, or "" when t publishes none.
func nodeLevelOf(t *v1alpha1.Target) string {
	if tp := t.Status.Topology; tp != nil && len(tp.Levels) > 0 {
		return tp.Levels[len(tp.Levels)-1]
	}
	return ""
}

// Package placement decides which Target runs an admitted Workload. It is
// pure code: the caller passes the Targets with their last published
// capacity and what is already in flight to them.
package placement

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	apimeta "k8s.io/apimachinery/pkg/api/meta"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// PodSet is one group of identical pods to place.
type PodSet struct {
	Name       string
	Count      int32
	GPUsPerPod int64
}

// Request is what one Workload needs.
type Request struct {
	// Flavors are the Kueue flavors the Workload was admitted with; the
	// target must serve all of them.
	Flavors []string
	PodSets []PodSet
}

// GPUs is the request's total GPU count.
func (r Request) GPUs() int64 {
	var n int64
	for _, ps := range r.PodSets {
		n += int64(ps.Count) * ps.GPUsPerPod
	}
	return n
}

// Candidate is a Target with the GPUs of Dispatches sent to it that its last
// heartbeat may not yet count, so two decisions between heartbeats never
// book the same GPUs.
type Candidate struct {
	Target       *v1alpha1.Target
	InFlightGPUs int64
}

// Decision is the chosen target.
type Decision struct {
	Target string
	// FreeAfter is the target's free GPUs once this job runs.
	FreeAfter int64
}

var (
	// ErrNoTarget: no Target serves the flavors. An administrator must
	// register one; the job waits.
	ErrNoTarget = errors.New("no target serves flavor")
	// ErrNoCapacity: targets serve the flavor but none fits the job now.
	ErrNoCapacity = errors.New("no target has room")
	// ErrNeverFits: the job's pods are larger than any node of every target
	// serving the flavor; it can never run.
	ErrNeverFits = errors.New("job can never fit")
)

// Choose picks, among the available targets serving req.Flavor, the one the
// job fits on with the fewest GPUs left over (best fit keeps large free
// blocks for large jobs). Ties go to the target named first.
func Choose(req Request, candidates []Candidate) (Decision, error) {
	var serving, reasons []string
	var best *Decision
	// largestNode is only trusted when every serving target has published
	// its node size: a target that has not reported yet might be larger.
	largestNode, sizeUnknown := int64(0), false
	for _, c := range candidates {
		t := c.Target
		if !servesFlavors(t, req.Flavors) {
			continue
		}
		serving = append(serving, t.Name)
		largestNode = max(largestNode, maxNodeGPUs(t))
		sizeUnknown = sizeUnknown || maxNodeGPUs(t) == 0
		if why := unavailable(t); why != "" {
			reasons = append(reasons, fmt.Sprintf("%s: %s", t.Name, why))
			continue
		}
		free := t.Status.FreeGPUs - c.InFlightGPUs
		if !fits(req, t, c.InFlightGPUs) {
			reasons = append(reasons, fmt.Sprintf("%s: %d GPUs free, job needs %d", t.Name, max(free, 0), req.GPUs()))
			continue
		}
		d := Decision{Target: t.Name, FreeAfter: free - req.GPUs()}
		if best == nil || d.FreeAfter < best.FreeAfter || (d.FreeAfter == best.FreeAfter && d.Target < best.Target) {
			best = &d
		}
	}
	// The cache lists targets in no fixed order; messages must not depend on it.
	sort.Strings(serving)
	switch {
	case best != nil:
		return *best, nil
	case len(serving) == 0:
		return Decision{}, fmt.Errorf("%w %s", ErrNoTarget, strings.Join(req.Flavors, ", "))
	case !sizeUnknown && maxPodGPUs(req) > largestNode:
		return Decision{}, fmt.Errorf("%w: a pod asks for %d GPUs, the largest node of targets %s has %d",
			ErrNeverFits, maxPodGPUs(req), strings.Join(serving, ", "), largestNode)
	default:
		sort.Strings(reasons)
		return Decision{}, fmt.Errorf("%w for flavor %s: %s", ErrNoCapacity, strings.Join(req.Flavors, ", "), strings.Join(reasons, "; "))
	}
}

func servesFlavors(t *v1alpha1.Target, flavors []string) bool {
	for _, want := range flavors {
		if !slices.Contains(t.Spec.Flavors, want) {
			return false
		}
	}
	return len(flavors) > 0
}

func unavailable(t *v1alpha1.Target) string {
	if t.Spec.Paused {
		return "paused"
	}
	c := apimeta.FindStatusCondition(t.Status.Conditions, v1alpha1.TargetAvailable)
	if c == nil {
		return "no heartbeat yet"
	}
	if c.Status != "True" {
		return fmt.Sprintf("not available (%s)", c.Reason)
	}
	return ""
}

// fits checks the job node by node: every pod must land on one node with
// enough free GPUs. Without per-node data the total is the only check.
// In-flight GPUs are taken off the fullest nodes first, the pessimistic
// guess, since the heartbeat has not said where they went.
func fits(req Request, t *v1alpha1.Target, inFlight int64) bool {
	if t.Status.FreeGPUs-inFlight < req.GPUs() {
		return false
	}
	free := nodeFree(t)
	if len(free) == 0 {
		// No per-node figures: the total and the largest node must do.
		return t.Status.MaxGPUsPerNode == 0 || maxPodGPUs(req) <= t.Status.MaxGPUsPerNode
	}
	sort.Slice(free, func(i, j int) bool { return free[i] < free[j] })
	for i := len(free) - 1; i >= 0 && inFlight > 0; i-- {
		take := min(free[i], inFlight)
		free[i] -= take
		inFlight -= take
	}
	sort.Slice(free, func(i, j int) bool { return free[i] < free[j] })
	pods := podsLargestFirst(req)
	for _, need := range pods {
		if need == 0 {
			continue
		}
		// Best fit: the node with the least free GPUs that still holds the pod.
		i := sort.Search(len(free), func(i int) bool { return free[i] >= need })
		if i == len(free) {
			return false
		}
		free[i] -= need
		sort.Slice(free, func(i, j int) bool { return free[i] < free[j] })
	}
	return true
}

func nodeFree(t *v1alpha1.Target) []int64 {
	if t.Status.Topology == nil {
		return nil
	}
	var free []int64
	for _, d := range t.Status.Topology.Domains {
		for _, g := range d.FreeGPUsPerNode {
			free = append(free, int64(g))
		}
	}
	return free
}

// maxNodeGPUs is the largest node's allocatable GPUs as the agent
// publishes it; 0 when unknown, and then no job is called never-fitting.
func maxNodeGPUs(t *v1alpha1.Target) int64 { return t.Status.MaxGPUsPerNode }

func maxPodGPUs(req Request) int64 {
	var m int64
	for _, ps := range req.PodSets {
		if ps.Count > 0 {
			m = max(m, ps.GPUsPerPod)
		}
	}
	return m
}

func podsLargestFirst(req Request) []int64 {
	var pods []int64
	for _, ps := range req.PodSets {
		for i := int32(0); i < ps.Count; i++ {
			pods = append(pods, ps.GPUsPerPod)
		}
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i] > pods[j] })
	return pods
}

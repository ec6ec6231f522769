// Package placement decides which Target runs an admitted Workload. It is
// pure code: the caller passes the Targets with their last published
// capacity and what is already in flight to them.
package placement

import (
	"cmp"
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
	// Required is a topology level (a key of the target's
	// TopologyStatus.Levels, such as "cloud.provider.com/topology-rack"):
	// all pods must land in one domain of it. A target without the level
	// cannot run the pod set. Required wins over Preferred.
	Required string
	// Preferred is a topology level whose single domain should hold all
	// pods; when none does, the next wider level is tried, then the whole
	// target. A target without the level places the pods anywhere.
	Preferred string
	// MilliCPUPerPod and MemoryPerPod (bytes) are each pod's requests,
	// checked against the target's free CPU and memory.
	MilliCPUPerPod int64
	MemoryPerPod   int64
}

// Request is what one Workload needs.
type Request struct {
	// Flavors are the Kueue flavors the Workload was admitted with; the
	// target must serve all of them. None (a job whose resources no flavor
	// of its ClusterQueue covers, such as a CPU-only job) goes to a target
	// that takes flavor-less jobs and serves one of QueueFlavors
	// (v1alpha1.Target.Serves).
	Flavors []string
	PodSets []PodSet
	// QueueFlavors are all flavors of the Workload's ClusterQueue. A
	// flavor-less job stays on their targets. When no target of the
	// admitted flavors can run a job but one of these flavors' targets
	// can, Kueue may admit it with that flavor next time.
	QueueFlavors []string
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
	Target *v1alpha1.Target
	// InFlightGPUs is the total in flight. Where it is not known (the part
	// InFlight does not attribute to a node of the target), it is taken
	// off the nodes with the most free GPUs first, the pessimistic guess.
	InFlightGPUs int64
	// InFlight says on which nodes in-flight GPUs are, as earlier decisions
	// assigned them (Decision.Reservations); they come off exactly those
	// nodes. When they add up to more than InFlightGPUs, their sum is the total.
	InFlight []Reservation
	// Ineligible, when set, says why this target could never run the job
	// (its backend would refuse it, or refused it before); it is not
	// considered, and the reason is part of the answer when nothing fits.
	Ineligible string
	// Queued is how many jobs the hub sent to this target beyond what it
	// had free (Decision.Queued) that have not started yet: they count
	// against the target's queue depth (Target.QueueDepth).
	Queued int32
	// Unsettled is how many jobs the hub sent to this Kubernetes spoke to
	// fit now that have not started: its free GPUs may count their bound
	// pods as well as InFlightGPUs does, so that it may have more room than
	// it seems. While any candidate has one, no job is queued (a job queued
	// on the wrong guess waits in one cluster while another has room).
	Unsettled int32
	// QueueDepth is the target's queue depth for this decision when the
	// hub deepened it (its adaptive depth); below Target.QueueDepth() it
	// is not read.
	QueueDepth int32
}

// Reservation is GPUs booked on one node of a target.
type Reservation struct {
	Node string
	GPUs int64
}

// Decision is the chosen target.
type Decision struct {
	Target string
	// FreeAfter is the target's free GPUs once this job runs.
	FreeAfter int64
	// PodSets says where each pod set of the request goes, in request
	// order; nil when the target publishes no free GPUs per node, and for
	// a queued job, which goes wherever the target's scheduler starts it.
	PodSets []PodSetAssignment
	// Queued: no target had room, and the job goes to wait in this
	// target's own queue (a Slurm cluster's, up to its queue depth).
	Queued bool
}

var (
	// ErrNoTarget: no Target serves the flavors. An administrator must
	// register one; the job waits.
	ErrNoTarget = errors.New("no target serves flavor")
	// ErrNoCapacity: targets serve the flavor but none fits the job now.
	ErrNoCapacity = errors.New("no target has room")
	// ErrNeverFits: the job's pods are larger than any node of every target
	// serving the flavor, or a pod set is larger than any domain of its
	// required level; it can never run.
	ErrNeverFits = errors.New("job can never fit")
	// ErrIneligible: every target that serves the job's flavors, and every
	// other target too, could never run it (see Candidate.Ineligible).
	ErrIneligible = errors.New("no target can run this job")
	// ErrOtherFlavors comes with ErrNoCapacity when no target serving the
	// job's flavors can run it but targets serving other flavors of its
	// queue could: Kueue may admit it with one of those.
	ErrOtherFlavors = errors.New("only targets of other flavors could run the job")
)

// otherFlavors is an ErrNoCapacity that is also ErrOtherFlavors; its
// message is written for the user.
type otherFlavors struct{ msg string }

func (e otherFlavors) Error() string { return e.msg }

func (e otherFlavors) Is(target error) bool {
	return target == ErrNoCapacity || target == ErrOtherFlavors
}

// Choose picks, among the available targets serving req.Flavors, the one the
// job fits on with the fewest GPUs left over (best fit keeps large free
// blocks for large jobs). Ties go to the target named first. Within the
// target each pod set with a topology level goes to the domain of that
// level that it leaves with the fewest free GPUs. Ineligible candidates are
// never chosen; when they are all the job has, it can never run.
func Choose(req Request, candidates []Candidate) (Decision, error) {
	var serving []*v1alpha1.Target
	var reasons, ineligible, eligibleElsewhere []string
	var open []ranked
	// queueable are the available targets that may take the job into
	// their own queue when none has room.
	var queueable []Candidate
	// largestNode is only trusted when every serving target has published
	// its node size: a target that has not reported yet might be larger.
	largestNode, sizeUnknown := int64(0), false
	for _, c := range candidates {
		t := c.Target
		if !t.Serves(req.Flavors, req.QueueFlavors) {
			if c.Ineligible == "" && len(req.Flavors) > 0 && servesAny(t, req.QueueFlavors) {
				eligibleElsewhere = append(eligibleElsewhere, t.Name)
			}
			continue
		}
		if c.Ineligible != "" {
			ineligible = append(ineligible, fmt.Sprintf("%s: %s", t.Name, c.Ineligible))
			continue
		}
		serving = append(serving, t)
		largestNode = max(largestNode, maxNodeGPUs(t))
		sizeUnknown = sizeUnknown || maxNodeGPUs(t) == 0
		if why := unavailable(t); why != "" {
			reasons = append(reasons, fmt.Sprintf("%s: %s", t.Name, why))
			continue
		}
		queueable = append(queueable, c)
		if why := noRoomForCPUOrMemory(req, t.Status.Free); why != "" {
			reasons = append(reasons, fmt.Sprintf("%s: %s", t.Name, why))
			continue
		}
		open = append(open, ranked{c, t.Status.FreeGPUs - totalInFlight(c) - req.GPUs()})
	}
	// Trying the targets from the fewest GPUs left, the first that holds
	// the job is the best fit, and most are never looked at node by node.
	slices.SortFunc(open, byFreeAfter)
	for _, r := range open {
		f, why := fitTarget(req, r.Candidate)
		if why == "" {
			defer f.release()
			return f.decision(req), nil
		}
		reasons = append(reasons, fmt.Sprintf("%s: %s", r.Target.Name, why))
	}
	// The cache lists targets in no fixed order; messages must not depend on it.
	slices.SortFunc(serving, func(a, b *v1alpha1.Target) int { return strings.Compare(a.Name, b.Name) })
	sort.Strings(ineligible)
	sort.Strings(eligibleElsewhere)
	if len(serving) == 0 {
		if len(ineligible) == 0 {
			return Decision{}, noTarget(req)
		}
		if len(eligibleElsewhere) > 0 {
			// Kueue may admit the job with another flavor next time.
			return Decision{}, otherFlavors{fmt.Sprintf("%v for %s: no target serving it can run the job (%s); targets %s could, under other flavors",
				ErrNoCapacity, flavorWords(req.Flavors), strings.Join(ineligible, "; "), strings.Join(eligibleElsewhere, ", "))}
		}
		return Decision{}, fmt.Errorf("%w: %s", ErrIneligible, strings.Join(ineligible, "; "))
	}
	if !sizeUnknown && maxPodGPUs(req) > largestNode {
		return Decision{}, fmt.Errorf("%w: a pod asks for %d GPUs, the largest node of targets %s has %d",
			ErrNeverFits, maxPodGPUs(req), strings.Join(names(serving), ", "), largestNode)
	}
	if why := neverFits(req, serving); why != "" {
		return Decision{}, fmt.Errorf("%w: %s", ErrNeverFits, why)
	}
	if why := neverFitsCPUOrMemory(req, serving); why != "" {
		return Decision{}, fmt.Errorf("%w: %s", ErrNeverFits, why)
	}
	if d, ok := queueOn(req, queueable); ok {
		return d, nil
	}
	sort.Strings(reasons)
	reasons = append(reasons, ineligible...)
	return Decision{}, fmt.Errorf("%w for %s: %s", ErrNoCapacity, flavorWords(req.Flavors), strings.Join(reasons, "; "))
}

func noTarget(req Request) error {
	if len(req.Flavors) > 0 {
		return fmt.Errorf("%w %s", ErrNoTarget, strings.Join(req.Flavors, ", "))
	}
	if len(req.QueueFlavors) > 0 {
		return fmt.Errorf("%w: the job was admitted with no flavor and no target serving its queue's flavors (%s) takes flavor-less jobs",
			ErrNoTarget, strings.Join(req.QueueFlavors, ", "))
	}
	return fmt.Errorf("%w: the job was admitted with no flavor and no target takes flavor-less jobs", ErrNoTarget)
}

func flavorWords(flavors []string) string {
	if len(flavors) == 0 {
		return "a flavor-less job"
	}
	return "flavor " + strings.Join(flavors, ", ")
}

// ranked is an available candidate with the free GPUs it would have left.
type ranked struct {
	Candidate
	freeAfter int64
}

// byFreeAfter orders by GPUs left, then name; those too small for the job
// in total go last, as they cannot win.
func byFreeAfter(a, b ranked) int {
	if (a.freeAfter < 0) != (b.freeAfter < 0) {
		return cmp.Compare(b.freeAfter, a.freeAfter)
	}
	if c := cmp.Compare(a.freeAfter, b.freeAfter); c != 0 {
		return c
	}
	return strings.Compare(a.Target.Name, b.Target.Name)
}

func names(targets []*v1alpha1.Target) []string {
	out := make([]string, len(targets))
	for i, t := range targets {
		out[i] = t.Name
	}
	return out
}

func servesAny(t *v1alpha1.Target, flavors []string) bool {
	for _, f := range flavors {
		if slices.Contains(t.Spec.Flavors, f) {
			return true
		}
	}
	return false
}

func unavailable(t *v1alpha1.Target) string {
	if t.Spec.Paused {
		return "paused"
	}
	if t.Spec.OutOfService {
		return "out of service"
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

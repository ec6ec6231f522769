package placement

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// fit is a target the job fits on, with where its pod sets go.
type fit struct {
	target    *v1alpha1.Target
	freeAfter int64
	// view is nil when the target publishes no free GPUs per node; plans
	// are then empty too.
	view  *view
	plans []plan
}

// plan is where one pod set goes in a view.
type plan struct {
	// level of the one domain holding every pod, -1 when they spread over
	// the target; first is a node of that domain.
	level, first int
	pods         []onNode
}

type onNode struct {
	node  int
	count int32
}

// release gives the fit's view back; nil is fine.
func (f *fit) release() {
	if f != nil {
		f.view.release()
	}
}

func (f *fit) decision(req Request) Decision {
	d := Decision{Target: f.target.Name, FreeAfter: f.freeAfter}
	if f.view == nil {
		return d
	}
	d.PodSets = make([]PodSetAssignment, len(req.PodSets))
	for i, ps := range req.PodSets {
		d.PodSets[i] = f.view.assignment(ps, f.plans[i])
	}
	return d
}

// fitTarget places the job on one available target, or says why it cannot.
// Every pod lands on one node with enough free GPUs; without per-node data
// the total and the largest node must do.
func fitTarget(req Request, c Candidate) (*fit, string) {
	t := c.Target
	for _, ps := range req.PodSets {
		if ps.Required != "" && ps.Count > 0 && !hasLevel(t, ps.Required) {
			return nil, fmt.Sprintf("has no topology level %s", ps.Required)
		}
	}
	inFlight := totalInFlight(c)
	free := t.Status.FreeGPUs - inFlight
	noRoom := func() string { return fmt.Sprintf("%d GPUs free, job needs %d", max(free, 0), req.GPUs()) }
	if free < req.GPUs() {
		return nil, noRoom()
	}
	v := newView(t)
	if v == nil {
		for _, ps := range req.PodSets {
			if ps.Required != "" && ps.Count > 0 {
				return nil, fmt.Sprintf("publishes no free GPUs per node to place pod set %s in one %s domain", ps.Name, ps.Required)
			}
		}
		if t.Status.MaxGPUsPerNode > 0 && maxPodGPUs(req) > t.Status.MaxGPUsPerNode {
			return nil, noRoom()
		}
		return &fit{target: t, freeAfter: free - req.GPUs()}, ""
	}
	v.takeInFlight(inFlight, c.InFlight)
	plans := make([]plan, len(req.PodSets))
	for _, i := range placeOrder(req) {
		p, why := v.placePodSet(req.PodSets[i])
		if why != "" {
			v.release()
			if why == spreadFailed {
				return nil, noRoom()
			}
			return nil, why
		}
		plans[i] = p
	}
	return &fit{target: t, freeAfter: free - req.GPUs(), view: v, plans: plans}, ""
}

func hasLevel(t *v1alpha1.Target, level string) bool {
	return t.Status.Topology != nil && slices.Contains(t.Status.Topology.Levels, level)
}

// spreadFailed: pods free to go anywhere on the target do not fit its nodes.
const spreadFailed = "\x00spread"

// placeOrder places the pod sets bound to one domain first, required
// before preferred and the largest first; then the rest, largest pods
// first onto the node with the least room that holds them.
func placeOrder(req Request) []int {
	rank := func(ps PodSet) int {
		switch {
		case ps.Required != "":
			return 0
		case ps.Preferred != "":
			return 1
		}
		return 2
	}
	order := identity(len(req.PodSets))
	slices.SortStableFunc(order, func(a, b int) int {
		pa, pb := req.PodSets[a], req.PodSets[b]
		if c := cmp.Compare(rank(pa), rank(pb)); c != 0 {
			return c
		}
		if rank(pa) < 2 {
			return cmp.Compare(int64(pb.Count)*pb.GPUsPerPod, int64(pa.Count)*pa.GPUsPerPod)
		}
		return cmp.Compare(pb.GPUsPerPod, pa.GPUsPerPod)
	})
	return order
}

// placePodSet places one pod set and takes its GPUs off the view.
func (v *view) placePodSet(ps PodSet) (plan, string) {
	g, n := ps.GPUsPerPod, ps.Count
	if n <= 0 {
		return plan{level: -1, first: -1}, ""
	}
	if ps.Required != "" {
		j := v.level(ps.Required)
		lo, hi, roomiest, ok := v.chooseDomain(j, g, n)
		if !ok {
			return plan{}, fmt.Sprintf("no %s domain has room for pod set %s (%d pods of %d GPUs), the roomiest holds %d",
				ps.Required, ps.Name, n, g, roomiest)
		}
		return v.fillDomain(j, lo, hi, g, n), ""
	}
	if ps.Preferred != "" {
		for j := v.level(ps.Preferred); j >= 0; j-- {
			if lo, hi, _, ok := v.chooseDomain(j, g, n); ok {
				return v.fillDomain(j, lo, hi, g, n), ""
			}
		}
	}
	p := plan{level: -1, first: -1}
	if g == 0 {
		return p, ""
	}
	var ok bool
	if p.pods, ok = v.fill(0, len(v.free), g, n); !ok {
		return plan{}, spreadFailed
	}
	return p, ""
}

// chooseDomain picks the domain of level j that holds n pods of g GPUs and
// has the fewest free GPUs, the first in canonical order among equals;
// roomiest is the most such pods any domain holds.
func (v *view) chooseDomain(j int, g int64, n int32) (lo, hi int, roomiest int64, ok bool) {
	bestFree := int64(-1)
	v.eachDomain(j, func(from, to int) {
		var free, pods int64
		for i := from; i < to; i++ {
			f := v.free[i]
			free += f
			if g > 0 && f >= g {
				pods += v.podsOn(f, g)
			}
		}
		if g == 0 {
			pods = int64(n)
		}
		roomiest = max(roomiest, pods)
		if pods >= int64(n) && (bestFree < 0 || free < bestFree) {
			lo, hi, bestFree = from, to, free
		}
	})
	return lo, hi, roomiest, bestFree >= 0
}

// eachDomain calls fn with the node range of every domain of level j, in
// canonical order. A level at or below the leaves' is the node level.
func (v *view) eachDomain(j int, fn func(from, to int)) {
	if j >= v.nLeaf {
		for i := range v.free {
			fn(i, i+1)
		}
		return
	}
	from := 0
	for l, end := range v.leafEnd {
		if l+1 == len(v.leafEnd) || v.split[l+1] <= j {
			fn(from, end)
			from = end
		}
	}
}

func (v *view) fillDomain(j, lo, hi int, g int64, n int32) plan {
	p := plan{level: j, first: lo}
	if g > 0 {
		p.pods, _ = v.fill(lo, hi, g, n)
	}
	return p
}

// fill puts n pods of g > 0 GPUs on the nodes of [lo, hi), each onto the
// node with the least room that holds it. For identical pods that is
// filling the nodes in ascending order of free GPUs.
func (v *view) fill(lo, hi int, g int64, n int32) ([]onNode, bool) {
	var pods []onNode
	for _, i := range v.ascending(lo, hi, g) {
		if n == 0 {
			break
		}
		k := int32(min(v.podsOn(v.free[i], g), int64(n)))
		v.free[i] -= int64(k) * g
		pods = append(pods, onNode{node: i, count: k})
		n -= k
	}
	return pods, n == 0
}

// neverFits explains why a pod set can never run: no serving target has
// its required level, or no domain of that level could hold it even with
// every node empty. It says nothing unless every serving target has
// published its nodes and their size, since one that has not might do.
func neverFits(req Request, serving []*v1alpha1.Target) string {
	if !slices.ContainsFunc(req.PodSets, func(ps PodSet) bool { return ps.Required != "" && ps.Count > 0 }) {
		return ""
	}
	views := make([]*view, len(serving))
	defer func() {
		for _, v := range views {
			v.release()
		}
	}()
	for i, t := range serving {
		if t.Status.MaxGPUsPerNode == 0 {
			return ""
		}
		if views[i] = newView(t); views[i] == nil {
			return ""
		}
	}
	targets := strings.Join(names(serving), ", ")
	for _, ps := range req.PodSets {
		if ps.Required == "" || ps.Count <= 0 {
			continue
		}
		var pods, gpus int64
		found := false
		for i, v := range views {
			j := v.level(ps.Required)
			if j < 0 {
				continue
			}
			found = true
			p, g := v.largestEmpty(j, ps.GPUsPerPod, serving[i].Status.MaxGPUsPerNode)
			pods, gpus = max(pods, p), max(gpus, g)
		}
		if !found {
			return fmt.Sprintf("pod set %s requires one %s domain, and targets %s have no such topology level",
				ps.Name, ps.Required, targets)
		}
		if ps.GPUsPerPod > 0 && pods < int64(ps.Count) {
			return fmt.Sprintf("pod set %s needs %d pods of %d GPUs in one %s domain, the largest of targets %s has %d GPUs and room for %d such pods",
				ps.Name, ps.Count, ps.GPUsPerPod, ps.Required, targets, gpus, pods)
		}
	}
	return ""
}

// largestEmpty is, over the domains of level j with every node empty, the
// most pods of g GPUs one holds and the most GPUs one has. A node's size is
// taken as the target's largest node's, an upper bound.
func (v *view) largestEmpty(j int, g, nodeGPUs int64) (pods, gpus int64) {
	v.eachDomain(j, func(from, to int) {
		var p, sum int64
		for i := from; i < to; i++ {
			size := max(nodeGPUs, v.free[i])
			sum += size
			if g > 0 {
				p += v.podsOn(size, g)
			}
		}
		pods, gpus = max(pods, p), max(gpus, sum)
	})
	return pods, gpus
}

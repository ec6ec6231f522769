package placement

import (
	"cmp"
	"slices"
	"strings"
	"sync"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// view is one target's nodes as placement sees them: in canonical order
// (leaf domains by their values, nodes of a leaf by name), so that every
// domain of every level is a contiguous range of nodes and the first of
// equal choices is the lexicographically smallest. free is what is left
// once in-flight work is taken off, and shrinks as pods are placed.
//
// Views are pooled: Choose builds one per target per decision, and a
// fleet of 100,000 nodes would otherwise allocate megabytes each time.
type view struct {
	levels []string
	// nLeaf is the number of levels above the node level: the length of
	// every leaf's values.
	nLeaf    int
	leafVals [][]string
	// leafEnd[i] is one past the last node of leaf i; leaf i starts at
	// leafEnd[i-1] (0 for the first).
	leafEnd []int
	// split[i] is the first level at which leaf i's values differ from
	// leaf i-1's: a domain of level j ends before leaf i when split[i] <= j.
	split []int
	free  []int64
	// src is where each node is published, for its name.
	src     []nodeAt
	domains []v1alpha1.TopologyDomain
	// named is false when some domain does not name its nodes; assignments
	// then stop at the leaf level.
	named bool
	// onePodPerNode: each pod is a whole node (a Slurm job's node is one
	// of its numNodes), however many GPUs are free on it.
	onePodPerNode bool

	norm                  [][]string // normalized values per published domain
	perm                  []int      // published domains in canonical order
	order, sorted, counts []int      // scratch of ascending
}

type nodeAt struct{ domain, node int32 }

var viewPool = sync.Pool{New: func() any { return new(view) }}

// newView returns nil when the target publishes no free GPUs per node.
// Release the view when done with it.
func newView(t *v1alpha1.Target) *view {
	topo := t.Status.Topology
	if topo == nil {
		return nil
	}
	n, named := 0, len(topo.Levels) > 0
	for i := range topo.Domains {
		if d := &topo.Domains[i]; len(d.FreeGPUsPerNode) > 0 {
			n += len(d.FreeGPUsPerNode)
			named = named && len(d.Nodes) == len(d.FreeGPUsPerNode)
		}
	}
	if n == 0 {
		return nil
	}
	v := viewPool.Get().(*view)
	v.levels, v.nLeaf, v.domains, v.named = topo.Levels, max(len(topo.Levels)-1, 0), topo.Domains, named
	v.onePodPerNode = t.Spec.Type == v1alpha1.TargetTypeSlurm
	v.free, v.src = slices.Grow(v.free[:0], n), slices.Grow(v.src[:0], n)
	v.norm, v.perm = v.norm[:0], v.perm[:0]
	for i := range topo.Domains {
		v.norm = append(v.norm, normalize(topo.Domains[i].Values, v.nLeaf))
		if len(topo.Domains[i].FreeGPUsPerNode) > 0 {
			v.perm = append(v.perm, i)
		}
	}
	byValues := func(a, b int) int { return slices.Compare(v.norm[a], v.norm[b]) }
	if !slices.IsSortedFunc(v.perm, byValues) {
		slices.SortStableFunc(v.perm, byValues)
	}
	v.leafVals, v.leafEnd, v.split = v.leafVals[:0], v.leafEnd[:0], v.split[:0]
	for k := 0; k < len(v.perm); {
		// Domains of equal values (a malformed list) are one leaf.
		end := k + 1
		for end < len(v.perm) && byValues(v.perm[k], v.perm[end]) == 0 {
			end++
		}
		v.appendNodes(v.perm[k:end])
		vals := v.norm[v.perm[k]]
		s := 0
		if l := len(v.leafVals); l > 0 {
			for s < v.nLeaf && vals[s] == v.leafVals[l-1][s] {
				s++
			}
		}
		v.leafVals, v.leafEnd, v.split = append(v.leafVals, vals), append(v.leafEnd, len(v.free)), append(v.split, s)
		k = end
	}
	return v
}

// appendNodes appends the nodes of one leaf, published as the given
// domains, by name.
func (v *view) appendNodes(of []int) {
	if d := &v.domains[of[0]]; len(of) == 1 && (!v.named || slices.IsSorted(d.Nodes)) {
		// The common case, as agents publish: nothing to reorder.
		for j, f := range d.FreeGPUsPerNode {
			v.free = append(v.free, int64(f))
			v.src = append(v.src, nodeAt{int32(of[0]), int32(j)})
		}
		return
	}
	start := len(v.src)
	for _, di := range of {
		for j := range v.domains[di].FreeGPUsPerNode {
			v.src = append(v.src, nodeAt{int32(di), int32(j)})
		}
	}
	if v.named {
		slices.SortStableFunc(v.src[start:], func(a, b nodeAt) int { return strings.Compare(v.nameAt(a), v.nameAt(b)) })
	}
	for _, a := range v.src[start:] {
		v.free = append(v.free, int64(v.domains[a.domain].FreeGPUsPerNode[a.node]))
	}
}

// release returns the view to the pool; nil is fine.
func (v *view) release() {
	if v == nil {
		return
	}
	clear(v.leafVals)
	clear(v.norm)
	v.levels, v.domains = nil, nil
	viewPool.Put(v)
}

// podsOn is how many pods of g > 0 GPUs fit in free GPUs of one node.
func (v *view) podsOn(free, g int64) int64 {
	if v.onePodPerNode {
		return min(free/g, 1)
	}
	return free / g
}

func (v *view) nameAt(a nodeAt) string { return v.domains[a.domain].Nodes[a.node] }

// name of node i; only when named.
func (v *view) name(i int) string { return v.nameAt(v.src[i]) }

// normalize gives values exactly k entries, so a malformed domain cannot
// index out of range; missing values are empty.
func normalize(values []string, k int) []string {
	if len(values) == k {
		return values
	}
	out := make([]string, k)
	copy(out, values)
	return out
}

func identity(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// takeInFlight takes in-flight GPUs off the nodes: reservations off the
// nodes they name, the rest (total minus what was attributed to a known
// node) off the nodes with the most free GPUs, the last in canonical order
// first among equals. A reservation larger than its node's free GPUs is
// partly counted by the heartbeat already; it cannot be elsewhere.
func (v *view) takeInFlight(total int64, reservations []Reservation) {
	if len(reservations) > 0 && v.named {
		booked := make(map[string]int64, len(reservations))
		for _, r := range reservations {
			booked[r.Node] += r.GPUs
		}
		for i := range v.free {
			if g, ok := booked[v.name(i)]; ok {
				v.free[i] = max(v.free[i]-g, 0)
				total -= g
				delete(booked, v.name(i)) // a node listed twice is booked once
			}
		}
	}
	if total <= 0 {
		return
	}
	order := v.ascending(0, len(v.free), 1)
	for k := len(order) - 1; k >= 0 && total > 0; k-- {
		i := order[k]
		take := min(v.free[i], total)
		v.free[i] -= take
		total -= take
	}
}

// totalInFlight is the candidate's in-flight GPUs: InFlightGPUs, or the sum
// of its reservations when that is larger.
func totalInFlight(c Candidate) int64 {
	var sum int64
	for _, r := range c.InFlight {
		sum += r.GPUs
	}
	return max(c.InFlightGPUs, sum)
}

// ascending returns the nodes in [lo, hi) with at least least free GPUs
// (least >= 1), by free GPUs then canonical order. Free GPUs are small
// integers, so a counting sort usually does it in linear time. The result
// is scratch, valid until the next call.
func (v *view) ascending(lo, hi int, least int64) []int {
	order := v.order[:0]
	top := int64(-1)
	for i := lo; i < hi; i++ {
		if v.free[i] >= least {
			order = append(order, i)
			top = max(top, v.free[i])
		}
	}
	span := top - least + 1
	if len(order) < 2 || span == 1 {
		v.order = order
		return order
	}
	if span > int64(4*len(order)+64) {
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(v.free[a], v.free[b]) })
		v.order = order
		return order
	}
	counts := slices.Grow(v.counts[:0], int(span)+1)[:span+1]
	clear(counts)
	for _, i := range order {
		counts[v.free[i]-least+1]++
	}
	for k := 1; k < len(counts); k++ {
		counts[k] += counts[k-1]
	}
	sorted := slices.Grow(v.sorted[:0], len(order))[:len(order)]
	for _, i := range order {
		b := v.free[i] - least
		sorted[counts[b]] = i
		counts[b]++
	}
	v.order, v.sorted, v.counts = order, sorted, counts
	return sorted
}

// leafOf is the leaf holding node i.
func (v *view) leafOf(i int) int {
	l, _ := slices.BinarySearch(v.leafEnd, i+1)
	return l
}

// domainValues are the values of node i's domain of level j, widest first.
// At the node level the node's name ends them; unnamed nodes stop at the
// leaf.
func (v *view) domainValues(j, i int) []string {
	leaf := v.leafVals[v.leafOf(i)]
	if j < v.nLeaf {
		return slices.Clone(leaf[:j+1])
	}
	if !v.named {
		return slices.Clone(leaf)
	}
	return append(slices.Clone(leaf), v.name(i))
}

func (v *view) level(name string) int {
	if name == "" {
		return -1
	}
	return slices.Index(v.levels, name)
}

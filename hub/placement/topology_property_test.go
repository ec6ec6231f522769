package placement

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// Property test of topology placement: random three-level fleets, random
// constraints and random in-flight work, checked against a direct model.

// mNode is a node as the model sees it: its leaf values, its name and its
// free GPUs once in-flight work is taken off.
type mNode struct {
	values []string
	name   string
	free   int64
}

// modelNodes takes in-flight GPUs off c's nodes the way Candidate
// documents: reservations off their nodes, the rest off the nodes with the
// most free GPUs, the last by (values, name) first among equals. The nodes
// come back sorted by (values, name).
func modelNodes(c Candidate) []mNode {
	var nodes []mNode
	topo := c.Target.Status.Topology
	if topo == nil {
		return nil
	}
	for _, d := range topo.Domains {
		for i, f := range d.FreeGPUsPerNode {
			nodes = append(nodes, mNode{values: d.Values, name: d.Nodes[i], free: int64(f)})
		}
	}
	slices.SortFunc(nodes, func(a, b mNode) int {
		if c := slices.Compare(a.values, b.values); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	left := totalInFlight(c)
	for _, r := range c.InFlight {
		for i := range nodes {
			if nodes[i].name == r.Node {
				nodes[i].free = max(nodes[i].free-r.GPUs, 0)
				left -= r.GPUs
			}
		}
	}
	order := identity(len(nodes))
	slices.SortFunc(order, func(a, b int) int {
		if c := cmp.Compare(nodes[b].free, nodes[a].free); c != 0 {
			return c
		}
		return b - a
	})
	for _, i := range order {
		take := min(nodes[i].free, max(left, 0))
		nodes[i].free -= take
		left -= take
	}
	return nodes
}

// mDomains groups nodes (sorted) into the domains of level j of levels:
// by the values up to j, or one per node at the node level.
func mDomains(nodes []mNode, levels []string, j int) [][]mNode {
	var out [][]mNode
	key := func(n mNode) string {
		if j >= len(levels)-1 {
			return strings.Join(n.values, "/") + "/" + n.name
		}
		return strings.Join(n.values[:j+1], "/")
	}
	for i, n := range nodes {
		if i == 0 || key(n) != key(nodes[i-1]) {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], n)
	}
	return out
}

// mHolds reports whether n pods of g GPUs fit the nodes, one pod per node.
func mHolds(nodes []mNode, g int64, n int32) bool {
	if g == 0 {
		return len(nodes) > 0
	}
	var pods int64
	for _, nd := range nodes {
		pods += nd.free / g
	}
	return pods >= int64(n)
}

func mFree(nodes []mNode) (sum int64) {
	for _, n := range nodes {
		sum += n.free
	}
	return sum
}

// mBest is, by brute force over the domains, the level and domain a single
// pod set goes to on c: the narrowest allowed level with a domain that
// holds it, and there the domain with the fewest free GPUs, the first by
// values among equals. level -1 is the whole target; ok is false when the
// pod set does not fit.
func mBest(c Candidate, ps PodSet) (level int, domain []mNode, ok bool) {
	t := c.Target
	if t.Status.FreeGPUs-totalInFlight(c) < int64(ps.Count)*ps.GPUsPerPod {
		return 0, nil, false
	}
	levels := t.Status.Topology.Levels
	nodes := modelNodes(c)
	try := func(j int) ([]mNode, bool) {
		var best []mNode
		for _, d := range mDomains(nodes, levels, j) {
			if mHolds(d, ps.GPUsPerPod, ps.Count) && (best == nil || mFree(d) < mFree(best)) {
				best = d
			}
		}
		return best, best != nil
	}
	if ps.Required != "" {
		j := slices.Index(levels, ps.Required)
		if j < 0 {
			return 0, nil, false
		}
		d, ok := try(j)
		return j, d, ok
	}
	for j := slices.Index(levels, ps.Preferred); ps.Preferred != "" && j >= 0; j-- {
		if d, ok := try(j); ok {
			return j, d, true
		}
	}
	return -1, nodes, ps.GPUsPerPod == 0 || mHolds(nodes, ps.GPUsPerPod, ps.Count)
}

func randomTopologyCandidate(rng *rand.Rand, i int) Candidate {
	w := tytesting.MakeKubernetesTarget(fmt.Sprintf("t%d", i), "h100")
	switch rng.Intn(8) {
	case 0:
		w.Paused().Available()
	default:
		w.Available()
	}
	levels := []string{block, rack, host}
	switch rng.Intn(6) {
	case 0:
		levels = []string{host}
	case 1:
		levels = []string{rack, host}
	}
	topo := &v1alpha1.TopologyStatus{Levels: levels}
	names := rng.Perm(30)
	var all []string
	var sum int64
	for b := range 1 + rng.Intn(3) {
		for r := range 1 + rng.Intn(3) {
			values := []string{fmt.Sprintf("b%d", b), fmt.Sprintf("b%d-r%d", b, r)}[3-len(levels):]
			d := v1alpha1.TopologyDomain{Values: slices.Clone(values)}
			for range 1 + rng.Intn(3) {
				name := fmt.Sprintf("n%02d", names[len(all)])
				free := int32(rng.Intn(9))
				d.Nodes, d.FreeGPUsPerNode = append(d.Nodes, name), append(d.FreeGPUsPerNode, free)
				all, sum = append(all, name), sum+int64(free)
			}
			topo.Domains = append(topo.Domains, d)
		}
	}
	w.Status.Topology, w.Status.FreeGPUs = topo, sum
	if rng.Intn(5) > 0 {
		w.MaxGPUsPerNode(8)
	}
	c := Candidate{Target: w.Obj()}
	for range rng.Intn(3) {
		node := all[rng.Intn(len(all))]
		if rng.Intn(6) == 0 {
			node = "gone"
		}
		c.InFlight = append(c.InFlight, Reservation{Node: node, GPUs: int64(1 + rng.Intn(8))})
	}
	if rng.Intn(4) > 0 {
		c.InFlightGPUs = totalInFlight(c) + int64(rng.Intn(3)*rng.Intn(5))
	}
	shuffleTopology(rng, c.Target)
	return c
}

// shuffleTopology reorders the published domains and the nodes of each:
// placement must not depend on the agent's order.
func shuffleTopology(rng *rand.Rand, t *v1alpha1.Target) {
	ds := t.Status.Topology.Domains
	rng.Shuffle(len(ds), func(i, j int) { ds[i], ds[j] = ds[j], ds[i] })
	for k := range ds {
		d := &ds[k]
		rng.Shuffle(len(d.Nodes), func(i, j int) {
			d.Nodes[i], d.Nodes[j] = d.Nodes[j], d.Nodes[i]
			d.FreeGPUsPerNode[i], d.FreeGPUsPerNode[j] = d.FreeGPUsPerNode[j], d.FreeGPUsPerNode[i]
		})
	}
}

func randomTopologyRequest(rng *rand.Rand) Request {
	req := request()
	for i := range 1 + rng.Intn(3)/2 {
		ps := PodSet{Name: fmt.Sprintf("ps%d", i), Count: int32(1 + rng.Intn(4)), GPUsPerPod: []int64{0, 1, 2, 4, 4, 8, 8}[rng.Intn(7)]}
		switch level := []string{block, rack, host, "cloud.provider.com/topology-zone"}[rng.Intn(4)]; rng.Intn(5) {
		case 0, 1:
			ps.Required = level
		case 2, 3:
			ps.Preferred = level
		}
		req.PodSets = append(req.PodSets, ps)
	}
	return req
}

func TestChooseTopologyProperties(t *testing.T) {
	rng := rand.New(rand.NewSource(20250105))
	outcomes := map[string]int{}
	for iter := range 3000 {
		req := randomTopologyRequest(rng)
		var cands []Candidate
		for i := range 1 + rng.Intn(3) {
			cands = append(cands, randomTopologyCandidate(rng, i))
		}
		got, err := Choose(req, cands)
		describe := func() string { return describeFleet(iter, req, cands) }
		checkDeterministic(t, rng, req, cands, got, err, describe)
		switch {
		case err == nil:
			outcomes["placed"]++
			checkDecision(t, req, cands, got, describe)
		case errors.Is(err, ErrNoCapacity):
			outcomes["no capacity"]++
			checkNoCapacity(t, req, cands, err, describe)
		case errors.Is(err, ErrNeverFits):
			outcomes["never fits"]++
			checkNoCapacity(t, req, cands, err, describe)
		default:
			t.Fatalf("Choose error %v wraps no expected sentinel\n%s", err, describe())
		}
	}
	t.Logf("outcomes of 3000 random requests: %v", outcomes)
	for _, o := range []string{"placed", "no capacity", "never fits"} {
		if outcomes[o] < 100 {
			t.Errorf("only %d of 3000 random requests ended %q; the generator is skewed: %v", outcomes[o], o, outcomes)
		}
	}
}

// checkDeterministic: the same fleet listed in another order, its domains
// and nodes too, gives the same answer.
func checkDeterministic(t *testing.T, rng *rand.Rand, req Request, cands []Candidate, got Decision, err error, describe func() string) {
	t.Helper()
	shuffled := make([]Candidate, len(cands))
	for i, c := range cands {
		shuffled[i] = Candidate{Target: c.Target.DeepCopy(), InFlightGPUs: c.InFlightGPUs, InFlight: slices.Clone(c.InFlight)}
		shuffleTopology(rng, shuffled[i].Target)
		rng.Shuffle(len(shuffled[i].InFlight), func(a, b int) {
			shuffled[i].InFlight[a], shuffled[i].InFlight[b] = shuffled[i].InFlight[b], shuffled[i].InFlight[a]
		})
	}
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	again, err2 := Choose(req, shuffled)
	if fmt.Sprint(err) != fmt.Sprint(err2) {
		t.Fatalf("Choose error depends on order: %v, then %v\n%s", err, err2, describe())
	}
	if diff := gocmp.Diff(got, again); diff != "" {
		t.Fatalf("Choose decision depends on order (-first +shuffled):\n%s\n%s", diff, describe())
	}
}

func describeFleet(iter int, req Request, cands []Candidate) string {
	var b strings.Builder
	fmt.Fprintf(&b, "iteration %d, request %+v\n", iter, req.PodSets)
	for _, c := range cands {
		t := c.Target
		fmt.Fprintf(&b, "  %s paused=%v free=%d max=%d inFlight=%d %v levels=%v\n", t.Name, t.Spec.Paused,
			t.Status.FreeGPUs, t.Status.MaxGPUsPerNode, c.InFlightGPUs, c.InFlight, t.Status.Topology.Levels)
		for _, d := range t.Status.Topology.Domains {
			fmt.Fprintf(&b, "    %v %v %v\n", d.Values, d.Nodes, d.FreeGPUsPerNode)
		}
	}
	return b.String()
}

// nodeDomain is the values of n's domain of level j.
func nodeDomain(n mNode, levels []string, j int) []string {
	if j >= len(levels)-1 {
		return append(slices.Clone(n.values), n.name)
	}
	return n.values[:j+1]
}

func eligible(c Candidate, ps PodSet) bool {
	if c.Target.Spec.Paused {
		return false
	}
	_, _, ok := mBest(c, ps)
	return ok
}

// checkDecision: the decision keeps every node within its free GPUs, puts
// every pod of a set inside the domain it names, and, for one pod set, is
// the model's best domain on the best target.
func checkDecision(t *testing.T, req Request, cands []Candidate, got Decision, describe func() string) {
	t.Helper()
	c := cands[slices.IndexFunc(cands, func(c Candidate) bool { return c.Target.Name == got.Target })]
	if c.Target.Spec.Paused {
		t.Fatalf("Choose picked paused %s\n%s", got.Target, describe())
	}
	if want := c.Target.Status.FreeGPUs - totalInFlight(c) - req.GPUs(); got.FreeAfter != want {
		t.Fatalf("FreeAfter = %d, want %d\n%s", got.FreeAfter, want, describe())
	}
	if len(got.PodSets) != len(req.PodSets) {
		t.Fatalf("%d pod set assignments for %d pod sets\n%s", len(got.PodSets), len(req.PodSets), describe())
	}
	levels := c.Target.Status.Topology.Levels
	byName := map[string]mNode{}
	for _, n := range modelNodes(c) {
		byName[n.name] = n
	}
	booked := map[string]int64{}
	for k, ps := range req.PodSets {
		a := got.PodSets[k]
		j := slices.Index(levels, a.Level)
		var count int32
		for m, node := range a.Nodes {
			n, ok := byName[node]
			if !ok || !slices.Equal(a.Domains[m].Values, nodeDomain(n, levels, len(levels)-1)) {
				t.Fatalf("pod set %s: node %s, domain %v is not one of the target's\n%s", ps.Name, node, a.Domains[m].Values, describe())
			}
			if a.Level != "" && !slices.Equal(nodeDomain(n, levels, j), a.Domain) {
				t.Fatalf("pod set %s: node %s is outside its %s domain %v\n%s", ps.Name, node, a.Level, a.Domain, describe())
			}
			count += a.Domains[m].Count
			booked[node] += int64(a.Domains[m].Count) * ps.GPUsPerPod
		}
		if ps.GPUsPerPod > 0 && count != ps.Count {
			t.Fatalf("pod set %s: %d pods assigned, %d asked\n%s", ps.Name, count, ps.Count, describe())
		}
		wantLevel := ps.Required != "" || (ps.Preferred != "" && ps.GPUsPerPod == 0 && slices.Contains(levels, ps.Preferred))
		switch {
		case ps.Required != "" && a.Level != ps.Required,
			ps.Required == "" && ps.Preferred == "" && a.Level != "",
			ps.Required == "" && a.Level != "" && j > slices.Index(levels, ps.Preferred),
			wantLevel && a.Level == "":
			t.Fatalf("pod set %s (required %q, preferred %q) placed at level %q\n%s", ps.Name, ps.Required, ps.Preferred, a.Level, describe())
		}
	}
	for node, gpus := range booked {
		if gpus > byName[node].free {
			t.Fatalf("node %s: %d GPUs booked, %d free after in-flight work\n%s", node, gpus, byName[node].free, describe())
		}
	}
	if len(req.PodSets) != 1 {
		return
	}
	ps, a := req.PodSets[0], got.PodSets[0]
	level, domain, ok := mBest(c, ps)
	if !ok {
		t.Fatalf("Choose placed %s on %s, which the model says it does not fit\n%s", ps.Name, c.Target.Name, describe())
	}
	if level >= 0 && (a.Level != levels[level] || !slices.Equal(a.Domain, nodeDomain(domain[0], levels, level))) {
		t.Fatalf("pod set %s in %s %v, the best fit is %s %v\n%s", ps.Name, a.Level, a.Domain,
			levels[level], nodeDomain(domain[0], levels, level), describe())
	}
	if level < 0 && a.Level != "" {
		t.Fatalf("pod set %s in %s %v, no single domain holds it\n%s", ps.Name, a.Level, a.Domain, describe())
	}
	for _, e := range cands {
		after := e.Target.Status.FreeGPUs - totalInFlight(e) - req.GPUs()
		if eligible(e, ps) && (after < got.FreeAfter || (after == got.FreeAfter && e.Target.Name < got.Target)) {
			t.Fatalf("Choose picked %s (%d left), but %s fits and leaves %d\n%s", got.Target, got.FreeAfter, e.Target.Name, after, describe())
		}
	}
}

// checkNoCapacity: for one pod set, no domain of any target holds it; and
// the job is called never-fitting exactly when, with every node empty, no
// domain of its required level on any target would hold it.
func checkNoCapacity(t *testing.T, req Request, cands []Candidate, err error, describe func() string) {
	t.Helper()
	if len(req.PodSets) == 1 {
		for _, c := range cands {
			if eligible(c, req.PodSets[0]) {
				t.Fatalf("Choose error %v, but %s fits\n%s", err, c.Target.Name, describe())
			}
		}
	}
	if never := mNeverFits(req, cands); never != errors.Is(err, ErrNeverFits) {
		t.Fatalf("Choose error %v, the model says never fits: %v\n%s", err, never, describe())
	}
}

func mNeverFits(req Request, cands []Candidate) bool {
	for _, c := range cands {
		if c.Target.Status.MaxGPUsPerNode == 0 {
			return false
		}
	}
	for _, ps := range req.PodSets {
		if ps.Required == "" {
			continue
		}
		var most int64 = -1
		for _, c := range cands {
			levels := c.Target.Status.Topology.Levels
			j := slices.Index(levels, ps.Required)
			if j < 0 {
				continue
			}
			empty := modelNodes(Candidate{Target: c.Target})
			for i := range empty {
				empty[i].free = max(empty[i].free, c.Target.Status.MaxGPUsPerNode)
			}
			for _, d := range mDomains(empty, levels, j) {
				most = max(most, 0)
				if ps.GPUsPerPod > 0 {
					var pods int64
					for _, n := range d {
						pods += n.free / ps.GPUsPerPod
					}
					most = max(most, pods)
				}
			}
		}
		if most < 0 || (ps.GPUsPerPod > 0 && most < int64(ps.Count)) {
			return true
		}
	}
	return false
}

package placement

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// Levels of the test topologies, as a Kubernetes spoke labels its nodes.
const (
	block = "cloud.provider.com/topology-block"
	rack  = "cloud.provider.com/topology-rack"
	host  = "kubernetes.io/hostname"
)

// leaf is one rack of a test topology: its block, its name and the free
// GPUs of its nodes, which are named <rack>-n<i>.
type leaf struct {
	block, rack string
	free        []int32
}

func rk(block, rack string, free ...int32) leaf { return leaf{block, rack, free} }

// racks publishes levels block, rack, hostname with one leaf domain per
// rack, in the order given, and sets status.freeGPUs to their sum.
func racks(w *tytesting.TargetWrapper, leaves ...leaf) *tytesting.TargetWrapper {
	topo := &v1alpha1.TopologyStatus{Levels: []string{block, rack, host}}
	var sum int64
	for _, l := range leaves {
		d := v1alpha1.TopologyDomain{Values: []string{l.block, l.rack}, FreeGPUsPerNode: l.free}
		for i, f := range l.free {
			d.Nodes = append(d.Nodes, fmt.Sprintf("%s-n%d", l.rack, i))
			sum += int64(f)
		}
		topo.Domains = append(topo.Domains, d)
	}
	w.Status.Topology, w.Status.FreeGPUs = topo, sum
	return w
}

// podSet is count pods of gpus GPUs named "node".
func podSet(count int32, gpus int64) PodSet {
	return PodSet{Name: "node", Count: count, GPUsPerPod: gpus}
}

func required(level string, ps PodSet) PodSet  { ps.Required = level; return ps }
func preferred(level string, ps PodSet) PodSet { ps.Preferred = level; return ps }

func request(podSets ...PodSet) Request { return Request{Flavors: []string{"h100"}, PodSets: podSets} }

// onNodes is a node-level assignment of a three-level target: each node
// "<rack>-n<i>" of block blk gets pods[node] pods.
func onNodes(ps PodSet, level string, domain []string, blk string, nodes ...string) PodSetAssignment {
	a := PodSetAssignment{Name: ps.Name, GPUsPerPod: ps.GPUsPerPod, Level: level, Domain: domain, Levels: []string{block, rack, host}}
	for _, n := range nodes {
		rackName := n[:strings.Index(n, "-")]
		if k := len(a.Nodes) - 1; k >= 0 && a.Nodes[k] == n {
			a.Domains[k].Count++
			continue
		}
		a.Domains = append(a.Domains, DomainCount{Values: []string{blk, rackName, n}, Count: 1})
		a.Nodes = append(a.Nodes, n)
	}
	return a
}

type placeCase struct {
	req        Request
	candidates []Candidate
	want       Decision
	wantErr    error
	wantMsg    []string
}

// runPlace checks the whole decision, where the pod sets go included.
func runPlace(t *testing.T, cases map[string]placeCase) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Choose(tc.req, tc.candidates)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("Choose error = %v, want %v", err, tc.wantErr)
			}
			for _, m := range tc.wantMsg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("Choose error %q does not contain %q", err, m)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Choose decision (-want +got):\n%s", diff)
			}
		})
	}
}

func TestChooseRequired(t *testing.T) {
	ps := required(rack, podSet(3, 8))
	runPlace(t, map[string]placeCase{
		"all pods in the one rack that holds them": {
			req:        request(ps),
			candidates: []Candidate{cand(racks(target("a"), rk("b1", "r1", 8, 8), rk("b1", "r2", 8, 8, 8)))},
			want: Decision{Target: "a", FreeAfter: 16, PodSets: []PodSetAssignment{
				onNodes(ps, rack, []string{"b1", "r2"}, "b1", "r2-n0", "r2-n1", "r2-n2"),
			}},
		},
		"the rack left with the fewest free GPUs wins": {
			req:        request(required(rack, podSet(2, 8))),
			candidates: []Candidate{cand(racks(target("a"), rk("b1", "r1", 8, 8, 8, 8), rk("b1", "r2", 8, 4, 8)))},
			want: Decision{Target: "a", FreeAfter: 36, PodSets: []PodSetAssignment{
				onNodes(required(rack, podSet(2, 8)), rack, []string{"b1", "r2"}, "b1", "r2-n0", "r2-n2"),
			}},
		},
		"ties go to the smallest domain values, whatever the published order": {
			req: request(required(rack, podSet(1, 8))),
			candidates: []Candidate{cand(racks(target("a"),
				rk("b2", "r1", 8), rk("b1", "r9", 8), rk("b1", "r3", 8)))},
			want: Decision{Target: "a", FreeAfter: 16, PodSets: []PodSetAssignment{
				onNodes(required(rack, podSet(1, 8)), rack, []string{"b1", "r3"}, "b1", "r3-n0"),
			}},
		},
		"pods do not span racks even when the target has room": {
			req:        request(ps),
			candidates: []Candidate{cand(racks(target("a"), rk("b1", "r1", 8, 8), rk("b1", "r2", 8, 8)))},
			wantErr:    ErrNoCapacity,
			wantMsg:    []string{"a: no " + rack + " domain has room for pod set node (3 pods of 8 GPUs), the roomiest holds 2"},
		},
		"a block spans its racks": {
			req: request(required(block, podSet(3, 8))),
			candidates: []Candidate{cand(racks(target("a"),
				rk("b1", "r1", 8, 8), rk("b1", "r2", 8), rk("b2", "r3", 8, 8)))},
			want: Decision{Target: "a", FreeAfter: 16, PodSets: []PodSetAssignment{
				onNodes(required(block, podSet(3, 8)), block, []string{"b1"}, "b1", "r1-n0", "r1-n1", "r2-n0"),
			}},
		},
		"the node level puts every pod on one node": {
			// 2 pods of 2: only the 8 and the 4 hold both; the 4 is left emptier.
			req:        request(required(host, podSet(2, 2))),
			candidates: []Candidate{cand(racks(target("a"), rk("b1", "r1", 8, 2, 4)))},
			want: Decision{Target: "a", FreeAfter: 10, PodSets: []PodSetAssignment{
				onNodes(required(host, podSet(2, 2)), host, []string{"b1", "r1", "r1-n2"}, "b1", "r1-n2", "r1-n2"),
			}},
		},
		"a Slurm node holds one pod of the job, however many GPUs it has free": {
			// Slurm gives a job whole nodes: 2 pods of 2 GPUs are 2 of its numNodes.
			req:        request(required(rack, podSet(2, 2))),
			candidates: []Candidate{cand(racks(target("a").Type(v1alpha1.TargetTypeSlurm), rk("b1", "r1", 4, 4)))},
			want: Decision{Target: "a", FreeAfter: 4, PodSets: []PodSetAssignment{
				onNodes(required(rack, podSet(2, 2)), rack, []string{"b1", "r1"}, "b1", "r1-n0", "r1-n1"),
			}},
		},
		"a Slurm job needs as many nodes as pods": {
			req:        request(required(rack, podSet(3, 2))),
			candidates: []Candidate{cand(racks(target("a").Type(v1alpha1.TargetTypeSlurm), rk("b1", "r1", 8, 8)))},
			wantErr:    ErrNoCapacity,
			wantMsg:    []string{"the roomiest holds 2"},
		},
		"the best rack decides between targets only through FreeAfter": {
			req: request(required(rack, podSet(2, 8))),
			candidates: []Candidate{
				cand(racks(target("big"), rk("b1", "r1", 8, 8), rk("b1", "r2", 8, 8))),
				cand(racks(target("small"), rk("b1", "r1", 8, 8), rk("b1", "r2", 4))),
			},
			want: Decision{Target: "small", FreeAfter: 4, PodSets: []PodSetAssignment{
				onNodes(required(rack, podSet(2, 8)), rack, []string{"b1", "r1"}, "b1", "r1-n0", "r1-n1"),
			}},
		},
	})
}

func TestChooseRequiredLevelMissing(t *testing.T) {
	runPlace(t, map[string]placeCase{
		"a target without the level cannot hold the pod set": {
			req: request(required(rack, podSet(1, 1))),
			candidates: []Candidate{
				cand(target("b").FreeGPUsPerNode(8)), // hostname only
				cand(target("a").FreeGPUs(8)),        // no topology at all
			},
			wantErr: ErrNoCapacity,
			wantMsg: []string{"a: has no topology level " + rack + "; b: has no topology level " + rack},
		},
		"the target that has the level is chosen": {
			req: request(required(rack, podSet(1, 8))),
			candidates: []Candidate{
				cand(target("a").FreeGPUsPerNode(8)),
				cand(racks(target("b"), rk("b1", "r1", 8, 8))),
			},
			want: Decision{Target: "b", FreeAfter: 8, PodSets: []PodSetAssignment{
				onNodes(required(rack, podSet(1, 8)), rack, []string{"b1", "r1"}, "b1", "r1-n0"),
			}},
		},
		"levels without per-node figures cannot place the pod set": {
			req:        request(required(rack, podSet(1, 8))),
			candidates: []Candidate{cand(target("a").FreeGPUs(8)).withLevels(block, rack, host)},
			wantErr:    ErrNoCapacity,
			wantMsg:    []string{"a: publishes no free GPUs per node to place pod set node in one " + rack + " domain"},
		},
	})
}

// unnamed drops the node names the agent published.
func unnamed(w *tytesting.TargetWrapper) *tytesting.TargetWrapper {
	for i := range w.Status.Topology.Domains {
		w.Status.Topology.Domains[i].Nodes = nil
	}
	return w
}

// withLevels publishes levels without domains.
func (c Candidate) withLevels(levels ...string) Candidate {
	c.Target.Status.Topology = &v1alpha1.TopologyStatus{Levels: levels}
	return c
}

func TestChoosePreferred(t *testing.T) {
	runPlace(t, map[string]placeCase{
		"the preferred level is met": {
			req:        request(preferred(rack, podSet(2, 8))),
			candidates: []Candidate{cand(racks(target("a"), rk("b1", "r1", 8, 8, 8), rk("b1", "r2", 8, 8)))},
			want: Decision{Target: "a", FreeAfter: 24, PodSets: []PodSetAssignment{
				onNodes(preferred(rack, podSet(2, 8)), rack, []string{"b1", "r2"}, "b1", "r2-n0", "r2-n1"),
			}},
		},
		"no rack holds it: one block does": {
			req: request(preferred(rack, podSet(3, 8))),
			candidates: []Candidate{cand(racks(target("a"),
				rk("b1", "r1", 8, 8), rk("b1", "r2", 8, 8), rk("b2", "r3", 8)))},
			want: Decision{Target: "a", FreeAfter: 16, PodSets: []PodSetAssignment{
				onNodes(preferred(rack, podSet(3, 8)), block, []string{"b1"}, "b1", "r1-n0", "r1-n1", "r2-n0"),
			}},
		},
		"no block holds it: anywhere on the target": {
			req:        request(preferred(rack, podSet(2, 8))),
			candidates: []Candidate{cand(racks(target("a"), rk("b1", "r1", 8), rk("b2", "r2", 8)))},
			want: Decision{Target: "a", FreeAfter: 0, PodSets: []PodSetAssignment{{
				Name: "node", GPUsPerPod: 8, Levels: []string{block, rack, host},
				Domains: []DomainCount{{Values: []string{"b1", "r1", "r1-n0"}, Count: 1}, {Values: []string{"b2", "r2", "r2-n0"}, Count: 1}},
				Nodes:   []string{"r1-n0", "r2-n0"},
			}}},
		},
		"a missing preferred level places anywhere": {
			req:        request(preferred(rack, podSet(2, 4))),
			candidates: []Candidate{cand(target("a").FreeGPUsPerNode(4, 8))},
			want: Decision{Target: "a", FreeAfter: 4, PodSets: []PodSetAssignment{{
				Name: "node", GPUsPerPod: 4, Levels: []string{host},
				Domains: []DomainCount{{Values: []string{"a-node-0"}, Count: 1}, {Values: []string{"a-node-1"}, Count: 1}},
				Nodes:   []string{"a-node-0", "a-node-1"},
			}}},
		},
		"a target without topology keeps the current behaviour": {
			req:        request(preferred(rack, podSet(2, 4))),
			candidates: []Candidate{cand(target("a").FreeGPUs(8))},
			want:       Decision{Target: "a", FreeAfter: 0},
		},
	})
}

func TestChooseUnconstrained(t *testing.T) {
	launcher := PodSet{Name: "launcher", Count: 1}
	runPlace(t, map[string]placeCase{
		"pods spread best fit and are pinned to nodes": {
			req:        request(podSet(3, 4)),
			candidates: []Candidate{cand(racks(target("a"), rk("b1", "r1", 8, 4), rk("b2", "r2", 2)))},
			want: Decision{Target: "a", FreeAfter: 2, PodSets: []PodSetAssignment{
				{Name: "node", GPUsPerPod: 4, Levels: []string{block, rack, host},
					Domains: []DomainCount{{Values: []string{"b1", "r1", "r1-n0"}, Count: 2}, {Values: []string{"b1", "r1", "r1-n1"}, Count: 1}},
					Nodes:   []string{"r1-n0", "r1-n1"}},
			}},
		},
		"pods without GPUs go anywhere; required ones into one domain": {
			req: request(launcher, required(rack, PodSet{Name: "sidecar", Count: 2}), required(rack, podSet(2, 8))),
			candidates: []Candidate{cand(racks(target("a"),
				rk("b1", "r1", 8, 8, 8), rk("b1", "r2", 8, 8), rk("b2", "r3", 1)))},
			want: Decision{Target: "a", FreeAfter: 25, PodSets: []PodSetAssignment{
				{Name: "launcher"},
				// No GPUs: the rack left with the fewest free GPUs, the workers'.
				{Name: "sidecar", Level: rack, Domain: []string{"b1", "r2"}, Levels: []string{block, rack},
					Domains: []DomainCount{{Values: []string{"b1", "r2"}, Count: 2}}},
				onNodes(required(rack, podSet(2, 8)), rack, []string{"b1", "r2"}, "b1", "r2-n0", "r2-n1"),
			}},
		},
		"large free counts are ordered too": {
			req:        request(podSet(2, 3)),
			candidates: []Candidate{cand(racks(target("a"), rk("b1", "r1", 1000, 3, 500)))},
			want: Decision{Target: "a", FreeAfter: 1497, PodSets: []PodSetAssignment{
				onNodes(podSet(2, 3), "", nil, "b1", "r1-n1", "r1-n2"),
			}},
		},
		"nodes without names are assigned by leaf domain": {
			req:        request(podSet(3, 4)),
			candidates: []Candidate{cand(unnamed(racks(target("a"), rk("b1", "r1", 8, 8), rk("b1", "r2", 4))))},
			want: Decision{Target: "a", FreeAfter: 8, PodSets: []PodSetAssignment{{
				Name: "node", GPUsPerPod: 4, Levels: []string{block, rack},
				Domains: []DomainCount{{Values: []string{"b1", "r1"}, Count: 2}, {Values: []string{"b1", "r2"}, Count: 1}},
			}}},
		},
		"a target without per-node data gets no assignment": {
			req:        request(podSet(2, 4)),
			candidates: []Candidate{cand(target("a").FreeGPUs(8))},
			want:       Decision{Target: "a", FreeAfter: 0},
		},
	})
}

func TestChooseInFlightOnNodes(t *testing.T) {
	two := func() *tytesting.TargetWrapper { return racks(target("a"), rk("b1", "r1", 8, 8)) }
	withRes := func(w *tytesting.TargetWrapper, total int64, res ...Reservation) Candidate {
		return Candidate{Target: w.Obj(), InFlightGPUs: total, InFlight: res}
	}
	one := podSet(1, 8)
	runPlace(t, map[string]placeCase{
		"a reservation comes off its own node": {
			req:        request(one),
			candidates: []Candidate{withRes(two(), 8, Reservation{Node: "r1-n0", GPUs: 8})},
			want:       Decision{Target: "a", FreeAfter: 0, PodSets: []PodSetAssignment{onNodes(one, "", nil, "b1", "r1-n1")}},
		},
		"unattributed in-flight GPUs come off the last of the fullest nodes": {
			req:        request(one),
			candidates: []Candidate{inFlight(two(), 8)},
			want:       Decision{Target: "a", FreeAfter: 0, PodSets: []PodSetAssignment{onNodes(one, "", nil, "b1", "r1-n0")}},
		},
		"a reservation on the only rack that fits makes the job wait": {
			req:        request(required(rack, podSet(2, 8))),
			candidates: []Candidate{withRes(racks(target("a"), rk("b1", "r1", 8, 8), rk("b1", "r2", 8, 4)), 4, Reservation{Node: "r1-n1", GPUs: 4})},
			wantErr:    ErrNoCapacity,
			wantMsg:    []string{"a: no " + rack + " domain has room for pod set node (2 pods of 8 GPUs), the roomiest holds 1"},
		},
		"the remainder beyond the reservations is still pessimistic": {
			// 8 in flight, 4 of them on r1-n2: the other 4 may be on either 8.
			req:        request(podSet(2, 6)),
			candidates: []Candidate{withRes(racks(target("a"), rk("b1", "r1", 8, 8, 4)), 8, Reservation{Node: "r1-n2", GPUs: 4})},
			wantErr:    ErrNoCapacity,
			wantMsg:    []string{"a: 12 GPUs free, job needs 12"},
		},
		"a reservation on a node the target no longer lists is pessimistic": {
			req:        request(one),
			candidates: []Candidate{withRes(racks(target("a"), rk("b1", "r1", 4, 8)), 0, Reservation{Node: "gone", GPUs: 4})},
			wantErr:    ErrNoCapacity,
			wantMsg:    []string{"a: 8 GPUs free, job needs 8"},
		},
		"a reservation larger than its node's free GPUs takes nothing elsewhere": {
			req:        request(podSet(1, 4)),
			candidates: []Candidate{withRes(two(), 12, Reservation{Node: "r1-n0", GPUs: 12})},
			want: Decision{Target: "a", FreeAfter: 0, PodSets: []PodSetAssignment{
				onNodes(podSet(1, 4), "", nil, "b1", "r1-n1"),
			}},
		},
	})
}

// TestChooseNeverDoubleBooks: decisions made one after another, each with
// the reservations of those before, never share a GPU.
func TestChooseNeverDoubleBooks(t *testing.T) {
	w := racks(target("a"), rk("b1", "r1", 8, 8, 8), rk("b1", "r2", 8, 8), rk("b2", "r3", 8, 4))
	reqs := []Request{
		request(required(rack, podSet(2, 8))),
		request(preferred(rack, podSet(2, 8))),
		request(podSet(2, 4)),
		request(required(host, podSet(1, 8))),
	}
	booked := map[string]int64{}
	var res []Reservation
	var total int64
	for i, req := range reqs {
		d, err := Choose(req, []Candidate{{Target: w.Obj(), InFlightGPUs: total, InFlight: res}})
		if err != nil {
			t.Fatalf("decision %d: %v", i, err)
		}
		for _, r := range d.Reservations() {
			booked[r.Node] += r.GPUs
			res = append(res, r)
			total += r.GPUs
		}
	}
	for _, dom := range w.Status.Topology.Domains {
		for i, n := range dom.Nodes {
			if booked[n] > int64(dom.FreeGPUsPerNode[i]) {
				t.Errorf("node %s has %d free and %d booked", n, dom.FreeGPUsPerNode[i], booked[n])
			}
		}
	}
	// 4 GPUs are left, on r1-n2.
	last := []Candidate{{Target: w.Obj(), InFlightGPUs: total, InFlight: res}}
	if _, err := Choose(request(podSet(1, 8)), last); !errors.Is(err, ErrNoCapacity) {
		t.Errorf("after booking %d of %d GPUs, Choose(1 pod of 8) = %v, want ErrNoCapacity", total, w.Status.FreeGPUs, err)
	}
	if d, err := Choose(request(podSet(1, 4)), last); err != nil || !slices.Equal(d.PodSets[0].Nodes, []string{"r1-n2"}) {
		t.Errorf("after booking %d of %d GPUs, Choose(1 pod of 4) = %+v, %v, want node r1-n2", total, w.Status.FreeGPUs, d, err)
	}
}

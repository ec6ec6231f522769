// Package placementbench measures topology-aware placement (hub/placement
// Choose) on large synthetic fleets, without an API server:
//
//	go test -run '^$' -bench . ./test/bench/placement/
//
// BenchmarkChooseMix is the headline: 100 targets of 10,000 nodes in all,
// levels block / rack / hostname, 8 GPUs per node, about 60% in use, and a
// mix of required-rack, preferred-block and unconstrained requests. It
// reports decisions per second and the p50 and p99 latency of one Choose.
// BenchmarkChooseScaling repeats the mix, and a request that fits nowhere,
// at 1,000, 10,000 and 100,000 nodes.
package placementbench

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/placement"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

const (
	targets       = 100
	gpusPerNode   = 8
	nodesPerRack  = 8
	racksPerBlock = 4

	block = "cloud.provider.com/topology-block"
	rack  = "cloud.provider.com/topology-rack"
	host  = "kubernetes.io/hostname"
)

// fleet builds targets totalling nodes nodes, published as their agents do
// (domains sorted by values, nodes by name). A node is busy (0 free) with
// probability 1/2, idle (8 free) with 1/5, else partly used. A third of the
// targets have work in flight: one earlier decision's nodes and a few GPUs
// the heartbeat has not placed.
func fleet(nodes int, seed int64) []placement.Candidate {
	rng := rand.New(rand.NewSource(seed))
	out := make([]placement.Candidate, 0, targets)
	for t := range targets {
		name := fmt.Sprintf("t%03d", t)
		n := nodes / targets
		if t < nodes%targets {
			n++
		}
		topo := &v1alpha1.TopologyStatus{Levels: []string{block, rack, host}}
		var free int64
		for i := range n {
			r := i / nodesPerRack
			if i%nodesPerRack == 0 {
				topo.Domains = append(topo.Domains, v1alpha1.TopologyDomain{
					Values: []string{fmt.Sprintf("%s-b%03d", name, r/racksPerBlock), fmt.Sprintf("%s-r%04d", name, r)},
				})
			}
			d := &topo.Domains[len(topo.Domains)-1]
			f := int32(0)
			switch p := rng.Intn(10); {
			case p < 2:
				f = gpusPerNode
			case p < 5:
				f = int32(1 + rng.Intn(gpusPerNode-1))
			}
			d.Nodes = append(d.Nodes, fmt.Sprintf("%s-n%05d", name, i))
			d.FreeGPUsPerNode = append(d.FreeGPUsPerNode, f)
			free += int64(f)
		}
		w := tytesting.MakeKubernetesTarget(name, "h100").Available().MaxGPUsPerNode(gpusPerNode)
		w.Status.Topology, w.Status.FreeGPUs = topo, free
		c := placement.Candidate{Target: w.Obj()}
		if t%3 == 0 && len(topo.Domains) > 0 {
			d := topo.Domains[rng.Intn(len(topo.Domains))]
			for i, node := range d.Nodes {
				if d.FreeGPUsPerNode[i] > 0 {
					c.InFlight = append(c.InFlight, placement.Reservation{Node: node, GPUs: int64(d.FreeGPUsPerNode[i])})
				}
			}
			var sum int64
			for _, r := range c.InFlight {
				sum += r.GPUs
			}
			c.InFlightGPUs = sum + int64(rng.Intn(2*gpusPerNode))
		}
		out = append(out, c)
	}
	return out
}

// mix is the request mix: a third each of required-rack, preferred-block
// and unconstrained, of several sizes.
func mix() []placement.Request {
	ps := func(count int32, gpus int64, req, pref string) placement.Request {
		return placement.Request{Flavors: []string{"h100"}, PodSets: []placement.PodSet{
			{Name: "launcher", Count: 1},
			{Name: "node", Count: count, GPUsPerPod: gpus, Required: req, Preferred: pref},
		}}
	}
	return []placement.Request{
		ps(2, 8, rack, ""), ps(4, 8, rack, ""), ps(6, 4, rack, ""),
		ps(8, 8, "", block), ps(16, 8, "", block), ps(4, 2, "", block),
		ps(1, 1, "", ""), ps(2, 4, "", ""), ps(8, 8, "", ""),
	}
}

// heartbeatEvery decisions the fleet's in-flight work is back to where it
// started, as if the agents had reported; in between, each decision's
// reservations are in flight on its target, as the hub keeps them.
const heartbeatEvery = 20

// runMix calls Choose b.N times over reqs and reports decisions per second
// of Choose alone and its latency percentiles. A request that fits nowhere
// is a decision too: the hub answers it as often.
func runMix(b *testing.B, nodes int, reqs []placement.Request) {
	base := fleet(nodes, 42)
	cands := slices.Clone(base)
	index := map[string]int{}
	for i, c := range cands {
		index[c.Target.Name] = i
	}
	lat := make([]time.Duration, 0, b.N)
	placed := 0
	var busy time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%heartbeatEvery == 0 {
			for k := range cands {
				cands[k].InFlight = slices.Clip(base[k].InFlight)
				cands[k].InFlightGPUs = base[k].InFlightGPUs
			}
		}
		req := reqs[i%len(reqs)]
		t0 := time.Now()
		d, err := placement.Choose(req, cands)
		took := time.Since(t0)
		lat, busy = append(lat, took), busy+took
		if err == nil {
			placed++
			c := &cands[index[d.Target]]
			c.InFlight = append(c.InFlight, d.Reservations()...)
			c.InFlightGPUs += req.GPUs()
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Nanoseconds()) }
	b.ReportMetric(float64(b.N)/busy.Seconds(), "decisions/s")
	b.ReportMetric(pct(0.50), "p50-ns")
	b.ReportMetric(pct(0.99), "p99-ns")
	b.ReportMetric(float64(placed)/float64(b.N), "placed/op")
}

// BenchmarkChooseMix is 100 targets of 10,000 nodes in all.
func BenchmarkChooseMix(b *testing.B) { runMix(b, 10_000, mix()) }

// noRoom asks for a whole free rack, which at this occupancy no target has
// (about 1 in 6 nodes is idle): every target is looked at node by node,
// the worst case.
func noRoom() []placement.Request {
	return []placement.Request{{Flavors: []string{"h100"}, PodSets: []placement.PodSet{
		{Name: "node", Count: nodesPerRack, GPUsPerPod: gpusPerNode, Required: rack},
	}}}
}

// BenchmarkChooseScaling shows how a decision grows with the fleet, for
// the mix and for the worst case.
func BenchmarkChooseScaling(b *testing.B) {
	for _, nodes := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("nodes=%d/mix", nodes), func(b *testing.B) { runMix(b, nodes, mix()) })
		b.Run(fmt.Sprintf("nodes=%d/no-room", nodes), func(b *testing.B) { runMix(b, nodes, noRoom()) })
	}
}

// BenchmarkChooseKind splits the headline mix by kind of request.
func BenchmarkChooseKind(b *testing.B) {
	reqs := mix()
	for _, k := range []struct {
		name string
		reqs []placement.Request
	}{{"required-rack", reqs[0:3]}, {"preferred-block", reqs[3:6]}, {"unconstrained", reqs[6:9]}, {"no-room", noRoom()}} {
		b.Run(k.name, func(b *testing.B) { runMix(b, 10_000, k.reqs) })
	}
}

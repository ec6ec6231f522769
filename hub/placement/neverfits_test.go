package placement

import "testing"

func TestChooseTopologyNeverFits(t *testing.T) {
	big := func(name string) Candidate {
		return cand(racks(target(name), rk("b1", "r1", 8, 8), rk("b1", "r2", 8)).MaxGPUsPerNode(8))
	}
	ps := required(rack, podSet(3, 8))
	runPlace(t, map[string]placeCase{
		"no rack of any serving target is large enough, even empty": {
			req: request(ps),
			candidates: []Candidate{
				cand(racks(target("b").Paused(), rk("b1", "r1", 0, 0), rk("b1", "r2", 8)).MaxGPUsPerNode(8)),
				big("a"),
			},
			wantErr: ErrNeverFits,
			wantMsg: []string{"pod set node needs 3 pods of 8 GPUs in one " + rack +
				" domain, the largest of targets a, b has 16 GPUs and room for 2 such pods"},
		},
		"a busy rack that is large enough keeps the job waiting": {
			req:        request(ps),
			candidates: []Candidate{cand(racks(target("a"), rk("b1", "r1", 0, 8, 0, 8)).MaxGPUsPerNode(8))},
			wantErr:    ErrNoCapacity,
			wantMsg:    []string{"a: 16 GPUs free, job needs 24"},
		},
		// Both backends report a node that takes no work now (cordoned or
		// NotReady on Kubernetes, drained or down on Slurm) in the topology
		// with no GPUs free: it counts for "could ever fit", not for "fits now".
		"a rack with a node out of service keeps the job waiting": {
			req:        request(ps),
			candidates: []Candidate{cand(racks(target("a"), rk("b1", "r1", 8, 8, 0), rk("b1", "r2", 8)).MaxGPUsPerNode(8))},
			wantErr:    ErrNoCapacity,
			wantMsg:    []string{"a: no " + rack + " domain has room for pod set node (3 pods of 8 GPUs), the roomiest holds 2"},
		},
		"every node of the only large rack out of service: waits, never refused": {
			req:        request(ps),
			candidates: []Candidate{cand(racks(target("a"), rk("b1", "r1", 0, 0, 0), rk("b1", "r2", 8)).MaxGPUsPerNode(8))},
			wantErr:    ErrNoCapacity,
		},
		"a target of unknown node size keeps the job waiting": {
			req:        request(ps),
			candidates: []Candidate{big("a"), cand(racks(target("b"), rk("b1", "r1", 8, 8)))},
			wantErr:    ErrNoCapacity,
		},
		"a target that has not published its topology keeps the job waiting": {
			req:        request(ps),
			candidates: []Candidate{big("a"), cand(target("b").FreeGPUs(64).MaxGPUsPerNode(8))},
			wantErr:    ErrNoCapacity,
			wantMsg:    []string{"b: has no topology level " + rack},
		},
		"no serving target has the level": {
			req:        request(ps),
			candidates: []Candidate{cand(target("a").FreeGPUsPerNode(8, 8, 8).MaxGPUsPerNode(8))},
			wantErr:    ErrNeverFits,
			wantMsg:    []string{"pod set node requires one " + rack + " domain, and targets a have no such topology level"},
		},
		"more pods than one node holds, at the node level": {
			req:        request(required(host, podSet(2, 8))),
			candidates: []Candidate{big("a")},
			wantErr:    ErrNeverFits,
			wantMsg:    []string{"pod set node needs 2 pods of 8 GPUs in one " + host + " domain, the largest of targets a has 8 GPUs and room for 1 such pods"},
		},
		"a pod larger than every node is said first": {
			req:        request(required(rack, podSet(1, 16))),
			candidates: []Candidate{big("a")},
			wantErr:    ErrNeverFits,
			wantMsg:    []string{"a pod asks for 16 GPUs, the largest node of targets a has 8"},
		},
		"no capacity lists the topology reasons, sorted": {
			req: request(ps),
			candidates: []Candidate{
				cand(target("c").FreeGPUsPerNode(8, 8, 8)),
				cand(target("b").Paused()),
				cand(racks(target("a"), rk("b1", "r1", 8, 8), rk("b1", "r2", 8, 8))),
			},
			wantErr: ErrNoCapacity,
			wantMsg: []string{"a: no " + rack + " domain has room for pod set node (3 pods of 8 GPUs), the roomiest holds 2; " +
				"b: paused; c: has no topology level " + rack},
		},
	})
}

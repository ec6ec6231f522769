package placement

import (
	"testing"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// slurmTarget is an available Slurm cluster serving h100 with 4 nodes of
// 4 GPUs, free as given.
func slurmTarget(name string, free ...int32) *tytesting.TargetWrapper {
	return tytesting.MakeSlurmTarget(name, "h100", "gpu").Available().FreeGPUsPerNode(free...).MaxGPUsPerNode(4)
}

func queued(w *tytesting.TargetWrapper, n int32, inFlight int64) Candidate {
	return Candidate{Target: w.Obj(), Queued: n, InFlightGPUs: inFlight}
}

// TestChooseQueueDepth: a job that fits nowhere waits in a Slurm
// cluster's or a Kubernetes spoke's own queue up to its queue depth, only
// once no target has room, and never when it is bound to one domain, could
// never run there, or is several pods on a Kubernetes spoke.
func TestChooseQueueDepth(t *testing.T) {
	full := func(name string) *tytesting.TargetWrapper { return slurmTarget(name, 0, 0, 0, 0) }
	// fullSpoke is a full Kubernetes spoke at the API's default depth.
	fullSpoke := func() *tytesting.TargetWrapper {
		return tytesting.MakeKubernetesTarget("k8s", "h100").Available().FreeGPUsPerNode(0, 0)
	}
	runChoose(t, map[string]chooseCase{
		"fits: not queued": {
			req:        job(1, 1),
			candidates: []Candidate{cand(slurmTarget("hpc", 0, 1, 0, 0))},
			want:       Decision{Target: "hpc", FreeAfter: 0},
		},
		"full: queued under the default depth": {
			req:        job(1, 1),
			candidates: []Candidate{queued(full("hpc"), v1alpha1.DefaultSlurmQueueDepth-1, 0)},
			want:       Decision{Target: "hpc", FreeAfter: -1, Queued: true},
		},
		"full: queue full": {
			req:        job(1, 1),
			candidates: []Candidate{queued(full("hpc").SlurmQueueDepth(2), 2, 2)},
			wantErr:    ErrNoCapacity,
			wantMsg:    []string{"hpc: 0 GPUs free, job needs 1"},
		},
		"a deeper depth the hub chose: queued past the spec": {
			req:        job(1, 1),
			candidates: []Candidate{{Target: full("hpc").SlurmQueueDepth(2).Obj(), Queued: 2, InFlightGPUs: 2, QueueDepth: 3}},
			want:       Decision{Target: "hpc", FreeAfter: -3, Queued: true},
		},
		"a depth below the spec is not read": {
			req:        job(1, 1),
			candidates: []Candidate{{Target: full("hpc").SlurmQueueDepth(2).Obj(), Queued: 1, InFlightGPUs: 1, QueueDepth: 1}},
			want:       Decision{Target: "hpc", FreeAfter: -2, Queued: true},
		},
		"depth 0 never queues, whatever the hub chose": {
			req:        job(1, 1),
			candidates: []Candidate{{Target: full("hpc").SlurmQueueDepth(0).Obj(), QueueDepth: 4}},
			wantErr:    ErrNoCapacity,
		},
		"depth 0 never queues": {
			req:        job(1, 1),
			candidates: []Candidate{cand(full("hpc").SlurmQueueDepth(0))},
			wantErr:    ErrNoCapacity,
		},
		"room elsewhere wins over a queue": {
			req:        job(1, 2),
			candidates: []Candidate{cand(full("hpc")), cand(target("k8s").FreeGPUsPerNode(8))},
			want:       Decision{Target: "k8s", FreeAfter: 6},
		},
		"in flight fills the free nodes: queued": {
			req:        job(1, 4),
			candidates: []Candidate{queued(slurmTarget("hpc", 4, 0, 0, 0), 0, 4)},
			want:       Decision{Target: "hpc", FreeAfter: -4, Queued: true},
		},
		"the queue with most room left, then by name": {
			req: job(1, 1),
			candidates: []Candidate{queued(full("a").SlurmQueueDepth(4), 3, 0), queued(full("b").SlurmQueueDepth(4), 1, 0),
				queued(full("c").SlurmQueueDepth(3), 0, 0)},
			want: Decision{Target: "b", FreeAfter: -1, Queued: true},
		},
		"Kubernetes: a job of one pod queued under the default depth": {
			req:        job(1, 1),
			candidates: []Candidate{cand(fullSpoke())},
			want:       Decision{Target: "k8s", FreeAfter: -1, Queued: true},
		},
		"Kubernetes: the default depth is one job": {
			req:        job(1, 1),
			candidates: []Candidate{queued(fullSpoke(), v1alpha1.DefaultKubernetesQueueDepth, 1)},
			wantErr:    ErrNoCapacity,
		},
		"Kubernetes: a job of several pods waits on the hub": {
			req:        job(2, 1),
			candidates: []Candidate{cand(fullSpoke())},
			wantErr:    ErrNoCapacity,
		},
		"Kubernetes: a job starting on any candidate keeps the job on the hub": {
			req:        job(1, 1),
			candidates: []Candidate{cand(fullSpoke()), {Target: full("hpc").Obj(), Unsettled: 1}},
			wantErr:    ErrNoCapacity,
		},
		"Kubernetes: depth 0 never queues": {
			req:        job(1, 1),
			candidates: []Candidate{cand(fullSpoke().KubernetesQueueDepth(0))},
			wantErr:    ErrNoCapacity,
		},
		"Kubernetes: a one-pod job with a pod set of none": {
			req: Request{Flavors: []string{"h100"}, PodSets: []PodSet{{Name: "init", Count: 0},
				{Name: "node", Count: 1, GPUsPerPod: 1}}},
			candidates: []Candidate{cand(fullSpoke().KubernetesQueueDepth(3))},
			want:       Decision{Target: "k8s", FreeAfter: -1, Queued: true},
		},
		"unavailable: not queued": {
			req:        job(1, 1),
			candidates: []Candidate{cand(full("hpc").AvailableCondition("False", "HeartbeatStale"))},
			wantErr:    ErrNoCapacity,
		},
		"paused: not queued": {
			req:        job(1, 1),
			candidates: []Candidate{cand(full("hpc").Paused())},
			wantErr:    ErrNoCapacity,
		},
		"ineligible: not queued": {
			req:        job(1, 1),
			candidates: []Candidate{{Target: full("hpc").Obj(), Ineligible: "no such launcher"}},
			wantErr:    ErrIneligible,
		},
		"more pods than nodes: never runs, not queued": {
			req:        job(5, 1),
			candidates: []Candidate{cand(full("hpc"))},
			wantErr:    ErrNoCapacity,
		},
		"larger pods than any node: never fits": {
			req:        job(1, 8),
			candidates: []Candidate{cand(full("hpc"))},
			wantErr:    ErrNeverFits,
		},
		"bound to one domain: waits on the hub": {
			req: Request{Flavors: []string{"h100"}, PodSets: []PodSet{{Name: "node", Count: 1, GPUsPerPod: 1,
				Required: "kubernetes.io/hostname"}}},
			candidates: []Candidate{cand(full("hpc"))},
			wantErr:    ErrNoCapacity,
		},
		"preferred domain: queued anywhere": {
			req: Request{Flavors: []string{"h100"}, PodSets: []PodSet{{Name: "node", Count: 1, GPUsPerPod: 1,
				Preferred: "kubernetes.io/hostname"}}},
			candidates: []Candidate{cand(full("hpc"))},
			want:       Decision{Target: "hpc", FreeAfter: -1, Queued: true},
		},
	})
}

// TestChooseQueuedHasNoNodes: a queued job is pinned to no node; the
// cluster's scheduler starts it wherever room frees first.
func TestChooseQueuedHasNoNodes(t *testing.T) {
	d, err := Choose(job(1, 1), []Candidate{cand(slurmTarget("hpc", 0, 0, 0, 0))})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Queued || d.PodSets != nil || len(d.Reservations()) != 0 {
		t.Errorf("queued decision = %+v, want queued with no pod set assignments or reservations", d)
	}
}

package placement

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

func ineligible(w interface{ Obj() *v1alpha1.Target }, why string) Candidate {
	return Candidate{Target: w.Obj(), Ineligible: why}
}

func withQueueFlavors(r Request, f ...string) Request {
	r.QueueFlavors = f
	return r
}

func cpuJob(count int32, milliCPU, memory int64) Request {
	return Request{PodSets: []PodSet{{Name: "node", Count: count, MilliCPUPerPod: milliCPU, MemoryPerPod: memory}}}
}

func cpuMem(cpu, mem string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
}

func TestChooseEligibility(t *testing.T) {
	runChoose(t, map[string]chooseCase{
		"an ineligible target is passed over for an eligible one with less room": {
			req:        job(1, 4),
			candidates: []Candidate{ineligible(target("a").FreeGPUs(8), "no command"), cand(target("b").FreeGPUs(4))},
			want:       Decision{Target: "b", FreeAfter: 0},
		},
		"every target ineligible: no target can run the job, each named with its reason": {
			req: job(1, 4),
			candidates: []Candidate{
				ineligible(target("b").FreeGPUs(8), "runtime has initializers"),
				ineligible(target("a").FreeGPUs(8), "the job has no command and the cluster runs no containers"),
			},
			wantErr: ErrIneligible,
			wantMsg: []string{"a: the job has no command and the cluster runs no containers; b: runtime has initializers"},
		},
		"ineligible under its flavor, eligible under another of its queue: the job waits for that flavor": {
			req: withQueueFlavors(job(1, 4), "h100", "a100"),
			candidates: []Candidate{
				ineligible(target("a").FreeGPUs(8), "no command"),
				cand(spoke("c", "a100").Available().FreeGPUs(8)),
			},
			wantErr: ErrNoCapacity,
			wantMsg: []string{"a: no command", "targets c could, under other flavors"},
		},
		"eligible only under a flavor its queue does not have: no target can run it": {
			req: withQueueFlavors(job(1, 4), "h100"),
			candidates: []Candidate{
				ineligible(target("a").FreeGPUs(8), "no command"),
				cand(spoke("c", "a100").Available().FreeGPUs(8)),
			},
			wantErr: ErrIneligible,
			wantMsg: []string{"a: no command"},
		},
		"a full eligible target keeps the job waiting, and the ineligible are listed too": {
			req:        job(1, 4),
			candidates: []Candidate{cand(target("a").FreeGPUs(2)), ineligible(target("b").FreeGPUs(8), "no command")},
			wantErr:    ErrNoCapacity,
			wantMsg:    []string{"a: 2 GPUs free, job needs 4", "b: no command"},
		},
	})
}

func TestChooseFlavorless(t *testing.T) {
	runChoose(t, map[string]chooseCase{
		"a CPU-only job goes to a target that takes flavor-less jobs": {
			req: cpuJob(2, 500, 1<<30),
			candidates: []Candidate{
				cand(target("a").FlavorlessJobs(v1alpha1.FlavorlessJobsDeny).CPUAndMemory(cpuMem("64", "256Gi"), cpuMem("64", "256Gi"))),
				cand(target("b").CPUAndMemory(cpuMem("16", "64Gi"), cpuMem("8", "32Gi"))),
			},
			want: Decision{Target: "b"},
		},
		"not enough free CPU keeps it waiting": {
			req:        cpuJob(2, 4000, 1<<30),
			candidates: []Candidate{cand(target("b").CPUAndMemory(cpuMem("16", "64Gi"), cpuMem("6", "32Gi")))},
			wantErr:    ErrNoCapacity,
			wantMsg:    []string{"b: 6 CPU free, job needs 8"},
		},
		"more memory than any target has can never run": {
			req:        cpuJob(2, 1000, 40<<30),
			candidates: []Candidate{cand(target("b").CPUAndMemory(cpuMem("16", "64Gi"), cpuMem("16", "64Gi")))},
			wantErr:    ErrNeverFits,
			wantMsg:    []string{"b has 64Gi memory in all"},
		},
		"a target that publishes no CPU figure is not held to one": {
			req:        cpuJob(1, 100000, 0),
			candidates: []Candidate{cand(target("b"))},
			want:       Decision{Target: "b"},
		},
	})
}

// TestChooseFlavorlessStaysInItsQueue (issue 26): a flavor-less job goes
// only to targets serving a flavor of the ClusterQueue that admitted it; a
// queue with no flavors at all sends it to any target that takes such jobs.
func TestChooseFlavorlessStaysInItsQueue(t *testing.T) {
	big, small := cpuMem("64", "256Gi"), cpuMem("16", "64Gi")
	spoke := func() Candidate {
		return cand(spoke("spoke", "gpu").Available().CPUAndMemory(small, small))
	}
	hpc := func() *tytesting.TargetWrapper {
		return tytesting.MakeSlurmTarget("hpc", "hpc", "gpu").Flavors("hpc", "gpu").Available()
	}
	runChoose(t, map[string]chooseCase{
		"a Slurm-only queue's job goes to the Slurm target, not the tighter spoke": {
			req:        withQueueFlavors(cpuJob(2, 500, 1<<30), "hpc"),
			candidates: []Candidate{spoke(), cand(hpc().CPUAndMemory(big, big))},
			want:       Decision{Target: "hpc"},
		},
		"it waits for its queue's target rather than run on another": {
			req:        withQueueFlavors(cpuJob(2, 8000, 1<<30), "hpc"),
			candidates: []Candidate{spoke(), cand(hpc().SlurmQueueDepth(0).CPUAndMemory(big, cpuMem("4", "64Gi")))},
			wantErr:    ErrNoCapacity,
			wantMsg:    []string{"hpc: 4 CPU free, job needs 16"},
		},
		"a target serving one of several queue flavors takes it": {
			req:        withQueueFlavors(cpuJob(1, 500, 1<<30), "a100", "gpu"),
			candidates: []Candidate{spoke()},
			want:       Decision{Target: "spoke"},
		},
		"no target of its queue's flavors": {
			req:        withQueueFlavors(cpuJob(1, 500, 1<<30), "h100"),
			candidates: []Candidate{spoke(), cand(hpc().CPUAndMemory(big, big))},
			wantErr:    ErrNoTarget,
			wantMsg:    []string{"no target serving its queue's flavors (h100) takes flavor-less jobs"},
		},
		"its queue's target denies flavor-less jobs": {
			req:        withQueueFlavors(cpuJob(1, 500, 1<<30), "hpc"),
			candidates: []Candidate{spoke(), cand(hpc().FlavorlessJobs(v1alpha1.FlavorlessJobsDeny).CPUAndMemory(big, big))},
			wantErr:    ErrNoTarget,
		},
		"a queue with no flavors sends it anywhere, as before": {
			req:        cpuJob(2, 4000, 1<<30),
			candidates: []Candidate{spoke(), cand(hpc().SlurmQueueDepth(0).CPUAndMemory(big, cpuMem("4", "64Gi")))},
			want:       Decision{Target: "spoke"},
		},
	})
}

// TestOnlyOtherFlavorsIsTold: the hub sends a job back to Kueue (which may
// admit it with another flavor) only when targets of other flavors could
// run it; a job that only waits for room is not marked so.
func TestOnlyOtherFlavorsIsTold(t *testing.T) {
	_, elsewhere := Choose(withQueueFlavors(job(1, 4), "h100", "a100"), []Candidate{
		ineligible(target("a").FreeGPUs(8), "no command"),
		cand(spoke("c", "a100").Available().FreeGPUs(8)),
	})
	if !errors.Is(elsewhere, ErrNoCapacity) || !errors.Is(elsewhere, ErrOtherFlavors) {
		t.Errorf("eligible only under another flavor: %v, want ErrNoCapacity and ErrOtherFlavors", elsewhere)
	}
	_, full := Choose(job(1, 4), []Candidate{cand(target("a").FreeGPUs(2))})
	if !errors.Is(full, ErrNoCapacity) || errors.Is(full, ErrOtherFlavors) {
		t.Errorf("full: %v, want ErrNoCapacity only", full)
	}
}

package v1alpha1

import "testing"

func TestServes(t *testing.T) {
	target := func(policy FlavorlessJobsPolicy, flavors ...string) *Target {
		return &Target{Spec: TargetSpec{Flavors: flavors, FlavorlessJobs: policy}}
	}
	cases := map[string]struct {
		target               *Target
		flavors, queueFlavor []string
		want                 bool
	}{
		"all the admitted flavors":         {target: target("", "a100", "h100"), flavors: []string{"a100", "h100"}, want: true},
		"one admitted flavor missing":      {target: target("", "a100"), flavors: []string{"a100", "h100"}},
		"flavor-less, queue of its flavor": {target: target("", "hpc"), queueFlavor: []string{"hpc"}, want: true},
		"flavor-less, one of the queue's":  {target: target("", "gpu"), queueFlavor: []string{"hpc", "gpu"}, want: true},
		// Issue 26: a CPU-only job of a Slurm-only queue ran on a spoke.
		"flavor-less, another queue's target":   {target: target("", "gpu"), queueFlavor: []string{"hpc"}},
		"flavor-less, a queue with no flavors":  {target: target("", "gpu"), want: true},
		"flavor-less, explicitly allowed":       {target: target(FlavorlessJobsAllow, "hpc"), queueFlavor: []string{"hpc"}, want: true},
		"flavor-less, denied":                   {target: target(FlavorlessJobsDeny, "hpc"), queueFlavor: []string{"hpc"}},
		"flavor-less, denied, no queue flavors": {target: target(FlavorlessJobsDeny, "hpc")},
		"admitted flavors ignore the queue's":   {target: target("", "a100"), flavors: []string{"a100"}, queueFlavor: []string{"hpc"}, want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.target.Serves(tc.flavors, tc.queueFlavor); got != tc.want {
				t.Errorf("Serves(%v, %v) = %v, want %v", tc.flavors, tc.queueFlavor, got, tc.want)
			}
		})
	}
}

package sandbox

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/controllers"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
)

// TestQueuesHoldWhatTheirTargetsHave: each queue covers cpu, memory and
// GPUs, sized to the kwok nodes (64 CPUs, 512Gi each) and the Slurm gpu
// partition (4 nodes of 4 CPUs, 4000 MiB and 4 GPUs).
func TestQueuesHoldWhatTheirTargetsHave(t *testing.T) {
	two := &fleet.Fleet{Spokes: []*fleet.Cluster{{Name: "spoke1"}, {Name: "spoke2"}}}
	one := &fleet.Fleet{Spokes: []*fleet.Cluster{{Name: "spoke1"}}}
	lq := controllers.Queue{ClusterQueue: "team-a", Namespace: "team-a", LocalQueue: "lq", Flavor: "gpu"}
	for _, tc := range []struct {
		name      string
		fleet     *fleet.Fleet
		o         Options
		withSlurm bool
		gpus      string
		cpu       string
		memory    string
	}{
		{name: "dev up's defaults", fleet: two, o: Options{Nodes: 4, GPUsPerNode: 8}, withSlurm: true,
			gpus: "80", cpu: "528", memory: "4210304Mi"},
		{name: "small, no Slurm", fleet: one, o: Options{Nodes: 2, GPUsPerNode: 8}, gpus: "16", cpu: "128", memory: "1Ti"},
		{name: "Slurm only", fleet: &fleet.Fleet{}, o: Options{GPUsPerNode: 8}, withSlurm: true,
			gpus: "16", cpu: "16", memory: "16000Mi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := lq
			want.GPUs, want.CPU, want.Memory = tc.gpus, tc.cpu, tc.memory
			if diff := cmp.Diff(want, sampleQueue(tc.fleet, tc.o, tc.withSlurm)); diff != "" {
				t.Errorf("team-a/lq (-want +got):\n%s", diff)
			}
		})
	}
	want := []controllers.Queue{
		{ClusterQueue: "team-a-hpc", Namespace: "team-a", LocalQueue: "hpc", Flavor: "hpc", GPUs: "16", CPU: "16", Memory: "16000Mi"},
		{ClusterQueue: "team-a-hpc-oci", Namespace: "team-a", LocalQueue: "hpc-oci", Flavor: "hpc-oci", GPUs: "16", CPU: "16", Memory: "16000Mi"},
	}
	if diff := cmp.Diff(want, slurmQueues()); diff != "" {
		t.Errorf("Slurm queues (-want +got):\n%s", diff)
	}
}

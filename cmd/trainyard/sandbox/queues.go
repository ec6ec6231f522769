package sandbox

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/controllers"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
)

// The sandbox's ClusterQueues are set as sites set them: each covers cpu,
// memory and GPUs in one resource group with one flavor, so a TrainJob
// requesting any of them (Trainer's examples request CPU and memory) is
// admitted with that flavor, and each quota is what the flavor's targets
// have. A job requesting nothing is still admitted with no flavor.

// sampleQueue is team-a/lq, of flavor sampleFlavor: every spoke's nodes
// and, with Slurm, target hpc's gpu partition serve it.
func sampleQueue(f *fleet.Fleet, o Options, withSlurm bool) controllers.Queue {
	var nodes []fleet.NodeSpec
	for _, s := range f.Spokes {
		nodes = append(nodes, spokeNodes(s.Name, o)...)
	}
	capacity := fleet.Capacity(nodes...)
	if withSlurm {
		for name, q := range slurmPartition {
			total := capacity[name]
			total.Add(q)
			capacity[name] = total
		}
	}
	return controllers.QueueFor(controllers.Queue{
		ClusterQueue: "team-a", Namespace: SampleNamespace, LocalQueue: SampleQueue, Flavor: sampleFlavor,
	}, capacity)
}

// slurmQueues are team-a/hpc and team-a/hpc-oci, whose flavors only the
// Slurm target of that name serves, from its cluster's gpu partition.
func slurmQueues() []controllers.Queue {
	return []controllers.Queue{
		controllers.QueueFor(controllers.Queue{ClusterQueue: "team-a-hpc", Namespace: SampleNamespace, LocalQueue: SlurmQueue,
			Flavor: hpcFlavor}, slurmPartition),
		controllers.QueueFor(controllers.Queue{ClusterQueue: "team-a-hpc-oci", Namespace: SampleNamespace, LocalQueue: OCIQueue,
			Flavor: hpcOCIFlavor}, slurmPartition),
	}
}

// setUpSlurmQueues makes slurmQueues.
func setUpSlurmQueues(ctx context.Context, f *fleet.Fleet) error {
	for _, q := range slurmQueues() {
		if err := controllers.SetUpQueue(ctx, f.Hub, q); err != nil {
			return err
		}
	}
	return nil
}

// slurmPartition is what each sandbox Slurm cluster's gpu partition has
// (hack/slurm/configure.sh): 4 nodes of CPUs=4, RealMemory=4000 (MiB, as
// Slurm counts) and gpu:4.
var slurmPartition = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("16"),
	corev1.ResourceMemory: resource.MustParse("16000Mi"),
	v1alpha1.GPUResource:  resource.MustParse("16"),
}

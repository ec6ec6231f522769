package backends

import trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"

// NumNodes is how many nodes a TrainJob of spec tj runs on with the runtime
// spec rt, as Trainer counts them: the TrainJob's trainer.numNodes, else
// the runtime's mlPolicy.numNodes, else 1. The hub's pin (Flux defaults),
// the JobSet render and the Slurm render all count with it.
func NumNodes(tj *trainer.TrainJobSpec, rt *trainer.TrainingRuntimeSpec) int32 {
	if tj != nil && tj.Trainer != nil && tj.Trainer.NumNodes != nil {
		return *tj.Trainer.NumNodes
	}
	if rt != nil && rt.MLPolicy != nil && rt.MLPolicy.NumNodes != nil {
		return *rt.MLPolicy.NumNodes
	}
	return 1
}

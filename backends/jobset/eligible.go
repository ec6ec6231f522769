package jobset

import (
	"errors"
	"fmt"
	"slices"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/kubeflow/trainer/v2/pkg/constants"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
)

// CheckRuntime says why the JobSet backend could never run a TrainJob of
// spec tj on the runtime spec: nil when it can, else the reason. It needs
// no client and changes neither argument. Render runs it first and wraps
// its reason in backends.ErrRejected, and the hub's eligibility check calls
// Render, so a job the hub calls eligible is refused by a spoke only for
// what the spoke itself says (its API server's validation). Backends that
// render through this one (LeaderWorkerSet) add checks of their own.
func CheckRuntime(spec *trainer.TrainingRuntimeSpec, tj *trainer.TrainJobSpec) error {
	if spec == nil || len(spec.Template.Spec.ReplicatedJobs) == 0 {
		return errors.New("the runtime has no replicated jobs")
	}
	if tj == nil {
		return errors.New("no TrainJob spec")
	}
	if g := tj.RuntimeRef.APIGroup; g != nil && *g != "" && *g != trainer.GroupVersion.Group {
		return fmt.Errorf("unsupported runtime group %q", *g)
	}
	if spec.PodGroupPolicy != nil {
		// A PodGroup and its scheduler on the spoke are not rendered.
		return errors.New("podGroupPolicy is not supported by the JobSet backend")
	}
	if ml := spec.MLPolicy; ml != nil && ml.MPI != nil {
		impl := ptr.Deref(ml.MPI.MPIImplementation, trainer.MPIImplementationOpenMPI)
		if impl != trainer.MPIImplementationOpenMPI {
			// Trainer's MPI plugin renders OpenMPI only.
			return fmt.Errorf("MPI implementation %s is not supported on Kubernetes spokes (OpenMPI is)", impl)
		}
	}
	if err := checkFlux(spec, tj); err != nil {
		return err
	}
	return checkInitializers(spec, tj)
}

// checkFlux refuses what Trainer's webhook refuses of a Flux TrainJob (no
// Trainer webhook runs on the hub): fewer than one process per node, and an
// init container of the reserved name in the trainer's pods.
func checkFlux(spec *trainer.TrainingRuntimeSpec, tj *trainer.TrainJobSpec) error {
	if !IsFlux(spec) {
		return nil
	}
	procs := spec.MLPolicy.Flux.NumProcPerNode
	if tj.Trainer != nil && tj.Trainer.NumProcPerNode != nil {
		procs = tj.Trainer.NumProcPerNode
	}
	if procs != nil && *procs < 1 {
		return fmt.Errorf("a Flux TrainJob needs at least one process per node, not %d", *procs)
	}
	for _, rj := range spec.Template.Spec.ReplicatedJobs {
		if rj.Name != constants.Node {
			continue
		}
		if slices.ContainsFunc(rj.Template.Spec.Template.Spec.InitContainers, func(c corev1.Container) bool {
			return c.Name == constants.FluxInstallerContainerName
		}) {
			return fmt.Errorf("init container %q of replicated job %q is reserved for Flux", constants.FluxInstallerContainerName, rj.Name)
		}
	}
	return nil
}

// checkInitializers refuses a TrainJob that configures a dataset or model
// initializer its runtime has no job for: Trainer would drop the setting
// and train without the data or model the user asked for.
func checkInitializers(spec *trainer.TrainingRuntimeSpec, tj *trainer.TrainJobSpec) error {
	in := tj.Initializer
	if in == nil {
		return nil
	}
	for _, c := range []struct {
		step   string
		wanted bool
	}{{constants.DatasetInitializer, in.Dataset != nil}, {constants.ModelInitializer, in.Model != nil}} {
		if c.wanted && AncestorJob(spec, c.step) == nil {
			return fmt.Errorf("the TrainJob configures a %s but the runtime has no %q replicated job", c.step, c.step)
		}
	}
	return nil
}

// IsFlux reports whether spec is a Flux runtime.
func IsFlux(spec *trainer.TrainingRuntimeSpec) bool {
	return spec.MLPolicy != nil && spec.MLPolicy.Flux != nil
}

// AncestorJob is the replicated job of spec for Trainer's step (such as
// dataset-initializer): the one labelled with it as its ancestor step
// (trainer.kubeflow.org/trainjob-ancestor-step), as Trainer's builder finds
// it, or named after it, as Trainer's webhook does. Nil when there is none.
func AncestorJob(spec *trainer.TrainingRuntimeSpec, step string) *jobsetv1alpha2.ReplicatedJob {
	for i, rj := range spec.Template.Spec.ReplicatedJobs {
		if rj.Template.Labels[constants.LabelTrainJobAncestor] == step || rj.Name == step {
			return &spec.Template.Spec.ReplicatedJobs[i]
		}
	}
	return nil
}

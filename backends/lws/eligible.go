package lws

import (
	"errors"
	"fmt"
	"strings"

	trainerapi "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	trainer "github.com/kubeflow/trainer/v2/pkg/constants"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/backends/jobset"
)

// Reasons the LeaderWorkerSet backend refuses a runtime that the JobSet
// backend runs: one group of a leader and its workers, all started
// together, with one volume claim per pod, has no place for them.
var (
	// ErrFlux: Trainer's Flux plugin writes the JobSet's pod hostnames
	// (<name>-node-0-<i>) into the broker config and scripts it mounts;
	// a LeaderWorkerSet's pods are named <name>-0-<i>.
	ErrFlux = errors.New("Flux runtimes are not supported by the LeaderWorkerSet backend: Trainer's Flux plugin names the JobSet's pods (<name>-node-0-<i>) in its broker config; use a JobSet target")
	// ErrVolumeClaimPolicies: JobSet makes one claim every replicated job
	// shares; LeaderWorkerSet's volumeClaimTemplates make one per pod.
	ErrVolumeClaimPolicies = errors.New("volumeClaimPolicies are not supported by the LeaderWorkerSet backend: it has no volume claim shared by all pods, only one per pod; use a JobSet target")
	// ErrInitializers: initializer jobs run to completion before the
	// trainer (dependsOn); a LeaderWorkerSet starts all its pods together
	// and restarts the ones that finish.
	ErrInitializers = errors.New("initializer jobs are not supported by the LeaderWorkerSet backend: a LeaderWorkerSet starts all its pods together and cannot run a step to completion before the trainer; use a JobSet target")
)

// CheckRuntime says why the LeaderWorkerSet backend could never run a
// TrainJob of spec tj on the runtime spec (nil when it can): the JobSet
// backend's checks (this backend renders through it) and then what a
// LeaderWorkerSet cannot hold. It needs no client and changes neither
// argument; Render runs it and wraps its reason in backends.ErrRejected.
func CheckRuntime(spec *trainerapi.TrainingRuntimeSpec, tj *trainerapi.TrainJobSpec) error {
	if err := jobset.CheckRuntime(spec, tj); err != nil {
		return err
	}
	if jobset.IsFlux(spec) {
		return ErrFlux
	}
	if vcp := spec.Template.Spec.VolumeClaimPolicies; len(vcp) > 0 {
		var claims []string
		for _, p := range vcp {
			for _, c := range p.Templates {
				claims = append(claims, c.Name)
			}
		}
		return fmt.Errorf("%w (claims %s)", ErrVolumeClaimPolicies, strings.Join(claims, ", "))
	}
	var inits, others []string
	for _, rj := range spec.Template.Spec.ReplicatedJobs {
		switch {
		case rj.Name == trainer.Node || rj.Name == trainer.Launcher:
		case isInitializer(&rj):
			inits = append(inits, rj.Name)
		default:
			others = append(others, rj.Name)
		}
	}
	if len(inits) > 0 {
		return fmt.Errorf("%w (replicated jobs %s)", ErrInitializers, strings.Join(inits, ", "))
	}
	if len(others) > 0 {
		return fmt.Errorf("the LeaderWorkerSet backend runs a trainer's nodes (and an MPI launcher) only, not replicated jobs %s", strings.Join(others, ", "))
	}
	return nil
}

// isInitializer: rj is Trainer's dataset or model initializer, by its
// ancestor step label or by name.
func isInitializer(rj *jobsetv1alpha2.ReplicatedJob) bool {
	for _, step := range []string{trainer.DatasetInitializer, trainer.ModelInitializer} {
		if rj.Name == step || rj.Template.Labels[trainer.LabelTrainJobAncestor] == step {
			return true
		}
	}
	return false
}

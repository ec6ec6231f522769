package backends

import (
	"fmt"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// Kind is the backend that runs a Target's jobs.
type Kind string

const (
	KindJobSet          Kind = "JobSet"
	KindLeaderWorkerSet Kind = "LeaderWorkerSet"
	KindSlurm           Kind = "Slurm"
)

// For is the backend of a Target of spec t: a Kubernetes target's
// spec.kubernetes.backend (JobSet when unset), Slurm for a Slurm target.
// It is the one place that maps a Target to its backend: the hub's
// eligibility check renders with the backend it names and the agent builds
// that backend, so both refuse the same targets. An unknown type or
// Kubernetes backend is an error that says so.
func For(t *v1alpha1.TargetSpec) (Kind, error) {
	switch t.Type {
	case v1alpha1.TargetTypeKubernetes:
		var b v1alpha1.KubernetesBackend
		if t.Kubernetes != nil {
			b = t.Kubernetes.Backend
		}
		switch b {
		case v1alpha1.KubernetesBackendJobSet, "":
			return KindJobSet, nil
		case v1alpha1.KubernetesBackendLeaderWorkerSet:
			return KindLeaderWorkerSet, nil
		}
		return "", fmt.Errorf("spec.kubernetes.backend %q is not JobSet or LeaderWorkerSet", b)
	case v1alpha1.TargetTypeSlurm:
		return KindSlurm, nil
	}
	return "", fmt.Errorf("unknown target type %q", t.Type)
}

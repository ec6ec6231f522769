package snapshot

import (
	"context"
	"errors"
	"fmt"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// Trainer's own runtime snapshot. Trainer v2.3's TrainJob controller copies
// a job's runtime into a ConfigMap <trainjob>-runtime-snapshot (data key
// "runtime": the runtime object as YAML), controlled by the TrainJob, and
// from then on builds the job from that copy instead of the live runtime
// (pkg/runtime/core/snapshot.go).
//
// Kueue v0.19.0 neither reads nor writes that ConfigMap: its TrainJob pod
// sets come from the runtime the TrainJob names (getRuntimeSpec, then the
// runtime's RuntimeInfo; it never calls NewObjects, where Trainer reads and
// writes the snapshot). The hub runs that code on a copy of the job naming
// its pinned copy (hub/kueuejob). So trainyard does not write the
// ConfigMap, since nothing on the hub would read it. Where one exists for
// the job (a Trainer controller reconciled it), Take reads the spec from it,
// after checking that it holds the same content as the pinned copy; if the
// two differ, Take refuses the job. Kueue's pod sets, the Dispatch and the
// remote render then never disagree with Trainer about which spec the job
// runs.
const (
	// TrainerSnapshotSuffix ends the name of Trainer's snapshot ConfigMap.
	TrainerSnapshotSuffix = "-runtime-snapshot"
	// TrainerSnapshotKey is the ConfigMap data key holding the runtime YAML.
	TrainerSnapshotKey = "runtime"
)

// Reading Trainer's snapshot ConfigMap (get only: the hub does not cache
// ConfigMaps; see hub.NewManager).
//
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get

// ErrSnapshotMismatch: the runtime a TrainJob names now holds another spec
// than the one it was pinned to, or Trainer's runtime snapshot of the
// TrainJob holds another spec than the runtime trainyard pinned, or is not a
// valid snapshot of it.
var ErrSnapshotMismatch = errors.New("the runtime does not match the one the job was pinned to")

// snapshotRuntime is the part of a snapshotted runtime object Take reads:
// TrainingRuntime and ClusterTrainingRuntime share it.
type snapshotRuntime struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta           `json:"metadata"`
	Spec            trainer.TrainingRuntimeSpec `json:"spec"`
}

// trainerSnapshot returns the runtime spec in Trainer's snapshot ConfigMap of
// tj, or nil when tj has none. A ConfigMap of that name controlled by another
// object (a deleted job of the same name, not yet garbage collected) is not
// tj's snapshot. One controlled by tj that Trainer itself would refuse (no
// runtime key, unreadable, another runtime) is ErrSnapshotMismatch.
func trainerSnapshot(ctx context.Context, c client.Reader, tj *trainer.TrainJob) (*trainer.TrainingRuntimeSpec, error) {
	if tj.UID == "" {
		return nil, nil // not created yet, as in the pinning webhook: nothing can own a snapshot of it
	}
	var cm corev1.ConfigMap
	key := client.ObjectKey{Namespace: tj.Namespace, Name: tj.Name + TrainerSnapshotSuffix}
	if err := c.Get(ctx, key, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read Trainer's runtime snapshot %s: %w", key, err)
	}
	if owner := metav1.GetControllerOf(&cm); owner == nil || owner.UID != tj.UID {
		return nil, nil
	}
	data, ok := cm.Data[TrainerSnapshotKey]
	if !ok {
		return nil, fmt.Errorf("%w: ConfigMap %s has no %q key", ErrSnapshotMismatch, key.Name, TrainerSnapshotKey)
	}
	var rt snapshotRuntime
	if err := yaml.Unmarshal([]byte(data), &rt); err != nil {
		return nil, fmt.Errorf("%w: ConfigMap %s: %v", ErrSnapshotMismatch, key.Name, err)
	}
	// The same checks as Trainer's getRuntimeSnapshot.
	ref := tj.Spec.RuntimeRef
	gvk := rt.GroupVersionKind()
	if (ref.Kind != nil && gvk.Kind != *ref.Kind) || (ref.APIGroup != nil && gvk.Group != *ref.APIGroup) || rt.Metadata.Name != ref.Name {
		return nil, fmt.Errorf("%w: ConfigMap %s holds %s %q of group %q, the job runs %s %q",
			ErrSnapshotMismatch, key.Name, gvk.Kind, rt.Metadata.Name, gvk.Group, ptr.Deref(ref.Kind, "<any kind>"), ref.Name)
	}
	return &rt.Spec, nil
}

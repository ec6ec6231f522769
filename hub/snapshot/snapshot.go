// Package snapshot takes the immutable copy of a TrainJob's runtime that a
// Dispatch carries: later edits to, or deletion of, the runtime never reach
// a job already dispatched.
package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueueconstants "sigs.k8s.io/kueue/pkg/controller/constants"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// ErrRuntimeNotFound: the TrainJob names a runtime that does not exist.
var ErrRuntimeNotFound = errors.New("runtime not found")

// ErrUnsupportedRuntime: the runtimeRef names a kind trainyard cannot run.
var ErrUnsupportedRuntime = errors.New("unsupported runtime kind")

// ErrNotPinned: the TrainJob was never pinned, so the runtime it names is
// a live one that can change after Kueue admitted the job.
var ErrNotPinned = errors.New("the TrainJob's runtime was not pinned when it was created")

// Take returns the snapshot of a pinned TrainJob's runtime, read from its
// pinned copy: the one the hub dispatches. A job that is not pinned is
// refused (ErrNotPinned): its runtimeRef names a live runtime the tenant can
// edit between Kueue's admission and the dispatch, and since the pin
// annotations are set only at creation, it can never be pinned later.
func Take(ctx context.Context, c client.Reader, tj *trainer.TrainJob) (*v1alpha1.RuntimeSnapshot, error) {
	ref, err := PinnedRef(tj)
	if err != nil {
		return nil, err
	}
	return resolveRef(ctx, c, tj, ref)
}

// notPinned is the ErrNotPinned of tj, telling its owner what to do.
func notPinned(tj *trainer.TrainJob) error {
	return fmt.Errorf("%w: trainyard pins the runtime of a TrainJob created with the %s label, and this one was created "+
		"without it (or while trainyard's pinning webhook was off), so it names the live %s %q, which can change after Kueue "+
		"admits the job; delete the TrainJob and create it again with the label",
		ErrNotPinned, kueueconstants.QueueLabel, ptr.Deref(tj.Spec.RuntimeRef.Kind, trainer.ClusterTrainingRuntimeKind), tj.Spec.RuntimeRef.Name)
}

// resolve resolves the runtime tj names (the pinning webhook resolves the
// source runtime with it) and returns its snapshot.
func resolve(ctx context.Context, c client.Reader, tj *trainer.TrainJob) (*v1alpha1.RuntimeSnapshot, error) {
	return resolveRef(ctx, c, tj, tj.Spec.RuntimeRef)
}

// resolveRef returns the snapshot of the runtime ref names for tj: the
// runtime tj names, or its pinned copy. Where Trainer has snapshotted the
// runtime for tj (see trainerSnapshot), the spec comes from Trainer's copy,
// which must match the runtime ref names or, with that gone, the hash
// recorded when it was pinned (a job never pinned whose runtime is gone has
// only Trainer's copy, which resolveRef then uses as it is).
func resolveRef(ctx context.Context, c client.Reader, tj *trainer.TrainJob, ref trainer.RuntimeRef) (*v1alpha1.RuntimeSnapshot, error) {
	if g := ptr.Deref(ref.APIGroup, trainer.GroupVersion.Group); g != trainer.GroupVersion.Group {
		return nil, fmt.Errorf("%w: apiGroup %q", ErrUnsupportedRuntime, g)
	}
	kind := v1alpha1.RuntimeKind(ptr.Deref(ref.Kind, trainer.ClusterTrainingRuntimeKind))
	live, liveErr := readRuntime(ctx, c, tj.Namespace, kind, ref.Name)
	if liveErr != nil && !errors.Is(liveErr, ErrRuntimeNotFound) {
		return nil, liveErr
	}
	if err := checkPinned(tj, kind, ref.Name, live); err != nil {
		return nil, err
	}
	fromTrainer, err := trainerSnapshot(ctx, c, tj)
	if err != nil {
		return nil, err
	}
	if fromTrainer == nil {
		if liveErr != nil {
			return nil, liveErr
		}
		return encodeSnapshot(kind, ref.Name, *live)
	}
	snap, err := encodeSnapshot(kind, ref.Name, *fromTrainer)
	if err != nil {
		return nil, err
	}
	want, against := tj.Annotations[v1alpha1.AnnotationRuntimeHash], "the hash recorded when it was pinned"
	if live != nil {
		if _, want, err = Encode(*live); err != nil {
			return nil, err
		}
		against = fmt.Sprintf("%s %q", kind, ref.Name)
	}
	if want != "" && want != snap.Hash {
		return nil, fmt.Errorf("%w: ConfigMap %s%s holds %s, %s has %s",
			ErrSnapshotMismatch, tj.Name, TrainerSnapshotSuffix, snap.Hash, against, want)
	}
	return snap, nil
}

// checkPinned refuses a live runtime whose content is not the one tj was
// pinned to: a pinned copy changed under the hub (by a client the policy
// does not stop, or deleted and re-created with other content) must not
// run, since Kueue admitted the job for the recorded content.
func checkPinned(tj *trainer.TrainJob, kind v1alpha1.RuntimeKind, name string, live *trainer.TrainingRuntimeSpec) error {
	want := tj.Annotations[v1alpha1.AnnotationRuntimeHash]
	if want == "" || live == nil {
		return nil
	}
	_, have, err := Encode(*live)
	if err != nil {
		return err
	}
	if have != want {
		return fmt.Errorf("%w: %s %q holds %s, the job was pinned to %s (the pinned copy was changed after the job was created)",
			ErrSnapshotMismatch, kind, name, have, want)
	}
	return nil
}

// readRuntime reads the spec of the runtime of kind and name (a
// TrainingRuntime in namespace).
func readRuntime(ctx context.Context, c client.Reader, namespace string, kind v1alpha1.RuntimeKind, name string) (*trainer.TrainingRuntimeSpec, error) {
	switch kind {
	case v1alpha1.RuntimeKindClusterTrainingRuntime:
		var rt trainer.ClusterTrainingRuntime
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &rt); err != nil {
			return nil, notFound(err, kind, name)
		}
		return &rt.Spec, nil
	case v1alpha1.RuntimeKindTrainingRuntime:
		var rt trainer.TrainingRuntime
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &rt); err != nil {
			return nil, notFound(err, kind, name)
		}
		return &rt.Spec, nil
	}
	return nil, fmt.Errorf("%w: kind %q", ErrUnsupportedRuntime, kind)
}

func encodeSnapshot(kind v1alpha1.RuntimeKind, name string, spec trainer.TrainingRuntimeSpec) (*v1alpha1.RuntimeSnapshot, error) {
	raw, hash, err := Encode(spec)
	if err != nil {
		return nil, err
	}
	return &v1alpha1.RuntimeSnapshot{Kind: kind, Name: name, Hash: hash, Spec: runtime.RawExtension{Raw: raw}}, nil
}

func notFound(err error, kind v1alpha1.RuntimeKind, name string) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%w: %s %q", ErrRuntimeNotFound, kind, name)
	}
	return err
}

// Encode returns v's JSON and its content hash. encoding/json writes struct
// fields in declaration order and map keys sorted, so equal specs hash equal.
func Encode(v any) (raw []byte, hash string, err error) {
	raw, err = json.Marshal(v)
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(raw)
	return raw, "sha256:" + hex.EncodeToString(sum[:]), nil
}

// TrainJob returns the snapshot of tj as the hub runs it, from the snapshot
// rt of its pinned runtime (Take): runtimeRef names the pinned copy, a Flux
// job's trainer.numNodes is defaulted from it (WithPinnedRuntime), and the
// fields that only concern the hub are left out.
func TrainJob(tj *trainer.TrainJob, rt *v1alpha1.RuntimeSnapshot) (*v1alpha1.TrainJobSnapshot, error) {
	var spec trainer.TrainingRuntimeSpec
	if err := decodeSpec(rt.Spec.Raw, &spec); err != nil {
		return nil, err
	}
	pinned, err := WithPinnedRuntime(tj, &spec)
	if err != nil {
		return nil, err
	}
	pinned.Spec.Suspend = nil
	pinned.Spec.ManagedBy = nil
	raw, err := json.Marshal(pinned.Spec)
	if err != nil {
		return nil, err
	}
	return &v1alpha1.TrainJobSnapshot{Name: tj.Name, UID: tj.UID, Spec: runtime.RawExtension{Raw: raw}}, nil
}

func decodeSpec(raw []byte, spec *trainer.TrainingRuntimeSpec) error {
	if err := json.Unmarshal(raw, spec); err != nil {
		return fmt.Errorf("decode runtime snapshot: %w", err)
	}
	return nil
}

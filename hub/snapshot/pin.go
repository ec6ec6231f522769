package snapshot

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
)

// Pinning. Kueue v0.19's TrainJob integration computes a job's pod sets
// from the live runtime every time it reconciles the job, and evicts the job
// when they change. So trainyard pins the runtime when the TrainJob is
// created: it copies the referenced runtime into an immutable,
// content-addressed TrainingRuntime in the job's namespace and records the
// copy in the job's pin annotations (source and hash, named in api/v1alpha1;
// PinnedRef derives the copy's name from them). The job's spec stays as the
// user wrote it, so a re-apply of the same manifest changes nothing.
// Everything that reads the job's runtime on the hub reads the copy: the
// Kueue integration the hub runs (hub/kueuejob), the Dispatch snapshot
// (Take) and so the remote render; editing or deleting the original runtime
// reaches no job already submitted.

// ErrPresetPin: a TrainJob was created with a pin annotation already set.
var ErrPresetPin = errors.New("the runtime pin annotations are set by trainyard only")

// ErrPinnedCopyMismatch: a TrainingRuntime of the pinned copy's name exists
// with other content than the runtime being pinned.
var ErrPinnedCopyMismatch = errors.New("a TrainingRuntime of the pinned copy's name holds other content")

// Pin records in tj's annotations a pinned copy of its runtime, creating
// the copy if needed. It changes tj's annotations in memory only; the
// webhook returns the change as a patch. A TrainJob that already carries a pin annotation is refused
// (ErrPresetPin): only Pin sets them. The source runtime is read through r,
// which should be uncached: a runtime edited a moment ago must be pinned as
// edited.
func Pin(ctx context.Context, r client.Reader, c client.Writer, tj *trainer.TrainJob) error {
	_, err := pinAt(ctx, r, c, tj, reuse{now: time.Now()})
	return err
}

// reuse says when an existing copy may be reused without a write.
type reuse struct {
	now time.Time
	// within: a copy stamped less than this before now is reused as it is
	// (0: every reuse stamps the copy).
	within time.Duration
	// cache, when set, is asked first for such a copy.
	cache client.Reader
}

// fresh reports whether rt was stamped recently enough to reuse unwritten.
//
// Why that is safe: the collector deletes a copy only at a version whose
// stamp is a grace period old, and a stamp only moves forward. A copy read
// with a stamp younger than within is therefore not deleted before
// grace - within from now, time enough for the job's create to land (the
// webhook's timeout is 10 s) when within is a small share of the grace
// (the hub uses a tenth). Once the job exists, the collector's live list
// sees it.
func (u reuse) fresh(rt *trainer.TrainingRuntime) bool {
	return u.within > 0 && u.now.Sub(lastPinned(rt)) < u.within
}

// pinAt pins tj and returns when the copy it points at was created.
func pinAt(ctx context.Context, r client.Reader, c client.Writer, tj *trainer.TrainJob, u reuse) (time.Time, error) {
	if err := refusePreset(tj); err != nil {
		return time.Time{}, err
	}
	snap, err := resolve(ctx, r, tj)
	if err != nil {
		return time.Time{}, err
	}
	name := pinnedName(snap.Name, snap.Hash)
	var spec trainer.TrainingRuntimeSpec
	if err := decodeSpec(snap.Spec.Raw, &spec); err != nil {
		return time.Time{}, err
	}
	source := fmt.Sprintf("%s/%s", snap.Kind, snap.Name)
	pinned := &trainer.TrainingRuntime{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: tj.Namespace,
			Labels: map[string]string{v1alpha1.LabelPinnedRuntime: "true"},
			Annotations: map[string]string{v1alpha1.AnnotationRuntimeSource: source, v1alpha1.AnnotationRuntimeHash: snap.Hash,
				v1alpha1.AnnotationPinnedAt: u.now.UTC().Format(time.RFC3339)},
		},
		Spec: spec,
	}
	created, err := ensureCopy(ctx, r, c, pinned, u)
	if err != nil {
		return time.Time{}, fmt.Errorf("pin runtime %s: %w", source, err)
	}
	if tj.Annotations == nil {
		tj.Annotations = map[string]string{}
	}
	tj.Annotations[v1alpha1.AnnotationRuntimeSource] = source
	tj.Annotations[v1alpha1.AnnotationRuntimeHash] = snap.Hash
	return created, nil
}

// refusePreset refuses a TrainJob that arrives with a pin annotation: a
// tenant could otherwise name a runtime of its choosing as already pinned.
func refusePreset(tj *trainer.TrainJob) error {
	for _, k := range []string{v1alpha1.AnnotationRuntimeSource, v1alpha1.AnnotationRuntimeHash} {
		if _, ok := tj.Annotations[k]; ok {
			return fmt.Errorf("%w: remove the %s and %s annotations (a manifest copied from an existing TrainJob carries them)",
				ErrPresetPin, v1alpha1.AnnotationRuntimeSource, v1alpha1.AnnotationRuntimeHash)
		}
	}
	return nil
}

// maxPinAttempts bounds ensureCopy's retries against a collector deleting
// the copy it is about to reuse.
const maxPinAttempts = 4

// ensureCopy creates want or reuses the copy of that name if it holds the
// same content, touching its v1alpha1.AnnotationPinnedAt unless u finds it fresh.
// The touch is an update at the resourceVersion just read, so a collector
// that read the copy before it fails its delete precondition; a copy
// deleted in between is created again. A copy of that name with other
// content is ErrPinnedCopyMismatch: the job is never pinned to a spec other
// than the one it was hashed from.
//
// A burst of jobs of one runtime thus costs one create and, per job, at
// most a cache read: without the freshness rule every job wrote the same
// copy, and parallel creates conflicted and retried into the webhook's
// timeout.
func ensureCopy(ctx context.Context, r client.Reader, c client.Writer, want *trainer.TrainingRuntime, u reuse) (created time.Time, err error) {
	key := client.ObjectKeyFromObject(want)
	hash := want.Annotations[v1alpha1.AnnotationRuntimeHash]
	if u.cache != nil && u.within > 0 {
		var have trainer.TrainingRuntime
		if err := u.cache.Get(ctx, key, &have); err == nil &&
			have.DeletionTimestamp == nil && samePinned(&have, hash) == nil && u.fresh(&have) {
			return have.CreationTimestamp.Time, nil
		}
	}
	for range maxPinAttempts {
		err := c.Create(ctx, want.DeepCopy())
		if err == nil {
			return u.now, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return time.Time{}, err
		}
		var have trainer.TrainingRuntime
		if err := r.Get(ctx, key, &have); apierrors.IsNotFound(err) {
			continue // collected in between: create it again
		} else if err != nil {
			return time.Time{}, err
		}
		if err := samePinned(&have, hash); err != nil {
			return time.Time{}, err
		}
		if have.DeletionTimestamp != nil {
			return time.Time{}, fmt.Errorf("pinned copy %s is being deleted; retry", key)
		}
		if u.fresh(&have) {
			return have.CreationTimestamp.Time, nil
		}
		have.Annotations[v1alpha1.AnnotationPinnedAt] = want.Annotations[v1alpha1.AnnotationPinnedAt]
		err = c.Update(ctx, &have)
		if err == nil {
			return have.CreationTimestamp.Time, nil
		}
		if !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return time.Time{}, err
		}
	}
	return time.Time{}, fmt.Errorf("pinned copy %s kept changing over %d attempts; retry", key, maxPinAttempts)
}

// samePinned checks that rt is a pinned copy of the content hash says.
func samePinned(rt *trainer.TrainingRuntime, hash string) error {
	_, have, err := Encode(rt.Spec)
	if err != nil {
		return err
	}
	if rt.Labels[v1alpha1.LabelPinnedRuntime] != "true" || rt.Annotations[v1alpha1.AnnotationRuntimeHash] != hash || have != hash {
		return fmt.Errorf("%w: TrainingRuntime %q in namespace %q holds %s (annotated %q), this job's runtime hashes %s; an administrator must delete it",
			ErrPinnedCopyMismatch, rt.Name, rt.Namespace, have, rt.Annotations[v1alpha1.AnnotationRuntimeHash], hash)
	}
	return nil
}

// pinnedName is the copy's name: the source's, shortened, and the hash, so
// equal content is shared and different content never collides. hash is
// "sha256:" and 64 hex digits (Encode).
func pinnedName(source, hash string) string {
	h := strings.TrimPrefix(hash, "sha256:")[:12]
	if len(source) > 50 {
		source = strings.TrimRight(source[:50], "-.")
	}
	return source + "-" + h
}

// PinnedRef is the reference to tj's pinned copy, from its pin annotations;
// a job without them, or with malformed ones, is ErrNotPinned.
func PinnedRef(tj *trainer.TrainJob) (trainer.RuntimeRef, error) {
	source, hash := tj.Annotations[v1alpha1.AnnotationRuntimeSource], tj.Annotations[v1alpha1.AnnotationRuntimeHash]
	_, name, ok := strings.Cut(source, "/")
	if !ok || name == "" || !validHash(hash) {
		return trainer.RuntimeRef{}, notPinned(tj)
	}
	return trainer.RuntimeRef{
		Name: pinnedName(name, hash), APIGroup: ptr.To(trainer.GroupVersion.Group), Kind: ptr.To(trainer.TrainingRuntimeKind),
	}, nil
}

// validHash: h is a content hash as Encode writes it.
func validHash(h string) bool {
	hexPart, ok := strings.CutPrefix(h, "sha256:")
	if !ok || len(hexPart) != 64 {
		return false
	}
	return strings.Trim(hexPart, "0123456789abcdef") == ""
}

// WithPinnedRuntime returns a copy of tj as the hub runs it: runtimeRef
// names the pinned copy, and a Flux job's trainer.numNodes is defaulted
// from spec (the pinned runtime's; see DefaultFluxNodes). tj is unchanged.
func WithPinnedRuntime(tj *trainer.TrainJob, spec *trainer.TrainingRuntimeSpec) (*trainer.TrainJob, error) {
	ref, err := PinnedRef(tj)
	if err != nil {
		return nil, err
	}
	out := tj.DeepCopy()
	out.Spec.RuntimeRef = ref
	DefaultFluxNodes(out, spec)
	return out, nil
}

// DefaultFluxNodes fills a Flux job's spec.trainer.numNodes from its
// runtime when the job leaves it unset, as the Trainer docs write Flux jobs.
// Trainer v2.3's Flux plugin dereferences it, and both Kueue's pod sets and
// the remote render run that plugin: without the default such a job fails
// with a nil-pointer panic. The value is the one the runtime gives anyway.
// Only copies of the job get it (WithPinnedRuntime): the user's spec stays
// as written.
func DefaultFluxNodes(tj *trainer.TrainJob, spec *trainer.TrainingRuntimeSpec) {
	if spec == nil || spec.MLPolicy == nil || spec.MLPolicy.Flux == nil {
		return
	}
	if tj.Spec.Trainer == nil {
		tj.Spec.Trainer = &trainer.Trainer{}
	}
	if tj.Spec.Trainer.NumNodes == nil {
		tj.Spec.Trainer.NumNodes = ptr.To(backends.NumNodes(&tj.Spec, spec))
	}
}

package snapshot

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Re-apply. The pinning webhook changes what the user wrote: runtimeRef
// names the pinned copy, the pin annotations appear, and a Flux job gains
// trainer.numNodes. Applying the same manifest again (kubectl apply, a
// server-side apply, every GitOps sync) sends the user's values back, which
// the API server refuses (runtimeRef and trainer are immutable, the pin
// annotations are the policy's). The keep-pin webhook reads such an update
// as what it is, the same manifest, and keeps what pinning set: the apply
// becomes a no-op, and a dry run of it (kubectl diff, a GitOps diff by
// server-side dry run) shows no change.

// KeepPinWebhookPath is where the hub serves the keep-pin webhook.
const KeepPinWebhookPath = "/mutate-trainer-kubeflow-org-v1alpha1-trainjob-keep-pin"

// KeepPinWebhook keeps, on updates of pinned TrainJobs, what pinning set.
// It reads nothing and writes nothing.
type KeepPinWebhook struct{}

// Handle answers one admission request.
func (KeepPinWebhook) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	var old, tj trainer.TrainJob
	if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if err := json.Unmarshal(req.Object.Raw, &tj); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if !KeepPin(&old, &tj) {
		return admission.Allowed("")
	}
	raw, err := json.Marshal(&tj)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, raw)
}

// KeepPin restores in tj, an update of the pinned TrainJob old, what
// pinning set and the update sends back as the user wrote it, and reports
// whether it changed tj:
//   - runtimeRef naming the runtime the copy was taken from becomes the
//     pinned copy again (another runtime stays, and is refused as before);
//   - pin annotations the update drops are restored (changed ones stay,
//     and the pinned-runtime policy refuses them);
//   - a trainer.numNodes pinning defaulted and the update drops is restored;
//   - Kueue's runtime patch, which its webhook adds at creation on the
//     user's behalf (so server-side apply counts it as the user's) and which
//     Kueue needs at every admission and eviction, is restored if dropped;
//   - a re-apply (the update names the source runtime, which only the
//     user's manifest does) does not suspend a job Kueue admitted: the
//     manifest says suspend: true for Kueue to flip, and Kueue would flip an
//     admitted job back at once.
func KeepPin(old, tj *trainer.TrainJob) bool {
	if old.Annotations[AnnotationHash] == "" || old.Annotations[AnnotationSource] == "" {
		return false
	}
	changed := false
	if !reflect.DeepEqual(tj.Spec.RuntimeRef, old.Spec.RuntimeRef) && namesSource(tj.Spec.RuntimeRef, old.Spec.RuntimeRef, old.Annotations[AnnotationSource]) {
		tj.Spec.RuntimeRef = old.Spec.RuntimeRef
		if !ptr.Deref(old.Spec.Suspend, false) && ptr.Deref(tj.Spec.Suspend, false) {
			tj.Spec.Suspend = old.Spec.Suspend
		}
		changed = true
	}
	if kueue := kueuePatch(old); kueue != nil && kueuePatch(tj) == nil {
		tj.Spec.RuntimePatches = append(tj.Spec.RuntimePatches, *kueue.DeepCopy())
		changed = true
	}
	for _, k := range []string{AnnotationSource, AnnotationHash} {
		if _, ok := tj.Annotations[k]; !ok {
			if tj.Annotations == nil {
				tj.Annotations = map[string]string{}
			}
			tj.Annotations[k] = old.Annotations[k]
			changed = true
		}
	}
	if droppedNumNodes(old.Spec.Trainer, tj.Spec.Trainer) {
		if tj.Spec.Trainer == nil {
			tj.Spec.Trainer = &trainer.Trainer{}
		}
		tj.Spec.Trainer.NumNodes = old.Spec.Trainer.NumNodes
		changed = true
	}
	return changed
}

// KueuePatchManager is the manager of the runtime patch Kueue's TrainJob
// webhook adds.
const KueuePatchManager = "kueue.x-k8s.io/manager"

func kueuePatch(tj *trainer.TrainJob) *trainer.RuntimePatch {
	for i := range tj.Spec.RuntimePatches {
		if tj.Spec.RuntimePatches[i].Manager == KueuePatchManager {
			return &tj.Spec.RuntimePatches[i]
		}
	}
	return nil
}

// namesSource reports whether ref names the runtime source ("Kind/name")
// as a user writes it: the group, when set, is Trainer's, and the kind is
// the source's, unset (a ClusterTrainingRuntime, as the API server defaults
// it), or the pinned one's: a client-side apply of a manifest that leaves
// the kind out patches only the name, so the pinned copy's kind stays.
func namesSource(ref, pinned trainer.RuntimeRef, source string) bool {
	if g := ptr.Deref(ref.APIGroup, trainer.GroupVersion.Group); g != trainer.GroupVersion.Group {
		return false
	}
	kind, name, _ := strings.Cut(source, "/")
	if ref.Name != name {
		return false
	}
	switch k := ptr.Deref(ref.Kind, ""); k {
	case "", kind, ptr.Deref(pinned.Kind, ""):
		return k != "" || kind == trainer.ClusterTrainingRuntimeKind
	}
	return false
}

// droppedNumNodes: the update's trainer is the old one without numNodes.
func droppedNumNodes(old, tj *trainer.Trainer) bool {
	if old == nil || old.NumNodes == nil || (tj != nil && tj.NumNodes != nil) {
		return false
	}
	without := old.DeepCopy()
	without.NumNodes = nil
	if tj == nil {
		return reflect.DeepEqual(without, &trainer.Trainer{})
	}
	return reflect.DeepEqual(without, tj)
}

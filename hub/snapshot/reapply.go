package snapshot

import (
	"context"
	"encoding/json"
	"net/http"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// Re-apply. Pinning leaves the user's spec as written and adds only the
// pin annotations, so applying the same manifest again (kubectl apply, a
// server-side apply, every GitOps sync) changes nothing but for what others
// added to the job since, which a re-apply sends back as the manifest has it:
//   - a server-side apply by a field manager that owns the pin annotations
//     (the webhook's additions to a create are counted as the creator's)
//     removes them, and the pinned-runtime policy refuses the removal;
//   - a manifest that lists runtimePatches replaces the list, dropping the
//     patch Kueue's integration added when it admitted the job;
//   - a manifest that says suspend: true (Trainer's Kueue example does)
//     suspends a job Kueue admitted.
// The keep-pin webhook keeps all three as they are, so the apply is a no-op
// and its dry run (kubectl diff, a GitOps diff) shows no change.

// KeepPinWebhookPath is where the hub serves the keep-pin webhook.
const KeepPinWebhookPath = "/mutate-trainer-kubeflow-org-v1alpha1-trainjob-keep-pin"

// KeepPinWebhook keeps, on updates of pinned TrainJobs, what pinning and
// Kueue's integration set. It reads nothing and writes nothing.
type KeepPinWebhook struct{}

// KueueFieldManager is the field manager the hub's Kueue TrainJob
// integration (hub/kueuejob) writes TrainJobs as: its suspend of an
// admitted job (an eviction) is the only one KeepPin lets through.
const KueueFieldManager = "trainyard-kueue"

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
	before := tj.DeepCopy()
	if !KeepPin(&old, &tj, fieldManager(req)) {
		return admission.Allowed("")
	}
	return patchResponse(req.Object.Raw, before, &tj)
}

// fieldManager is the field manager of an update ("" when unknown). The
// API server passes a patch's options on as UpdateOptions.
func fieldManager(req admission.Request) string {
	var o metav1.UpdateOptions
	if len(req.Options.Raw) == 0 || json.Unmarshal(req.Options.Raw, &o) != nil {
		return ""
	}
	return o.FieldManager
}

// KeepPin restores in tj, an update of the pinned TrainJob old by
// manager, and reports whether it changed tj:
//   - pin annotations the update drops (changed ones stay, and the
//     pinned-runtime policy refuses them);
//   - Kueue's runtime patch, if the update drops it;
//   - an admitted (unsuspended) job stays unsuspended unless the hub's
//     Kueue integration suspends it: under Kueue a job is stopped by
//     deactivating its Workload, and Kueue would unsuspend an admitted job
//     at once anyway.
func KeepPin(old, tj *trainer.TrainJob, manager string) bool {
	if old.Annotations[v1alpha1.AnnotationRuntimeHash] == "" || old.Annotations[v1alpha1.AnnotationRuntimeSource] == "" {
		return false
	}
	changed := false
	for _, k := range []string{v1alpha1.AnnotationRuntimeSource, v1alpha1.AnnotationRuntimeHash} {
		if _, ok := tj.Annotations[k]; !ok {
			if tj.Annotations == nil {
				tj.Annotations = map[string]string{}
			}
			tj.Annotations[k] = old.Annotations[k]
			changed = true
		}
	}
	if kueue := kueuePatch(old); kueue != nil && kueuePatch(tj) == nil {
		tj.Spec.RuntimePatches = append(tj.Spec.RuntimePatches, *kueue.DeepCopy())
		changed = true
	}
	if manager != KueueFieldManager && !ptr.Deref(old.Spec.Suspend, false) && ptr.Deref(tj.Spec.Suspend, false) {
		tj.Spec.Suspend = old.Spec.Suspend
		changed = true
	}
	return changed
}

func kueuePatch(tj *trainer.TrainJob) *trainer.RuntimePatch {
	for i := range tj.Spec.RuntimePatches {
		if tj.Spec.RuntimePatches[i].Manager == v1alpha1.KueueRuntimePatchManager {
			return &tj.Spec.RuntimePatches[i]
		}
	}
	return nil
}

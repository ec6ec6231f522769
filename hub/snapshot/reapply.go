package snapshot

import (
	"context"
	"encoding/json"
	"net/http"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Re-apply. Pinning leaves the user's spec as written and adds only the
// pin annotations, so applying the same manifest again (kubectl apply, a
// server-side apply, every GitOps sync) changes nothing, with one
// exception: a server-side apply by a field manager that owns the pin
// annotations (the webhook's additions to a create are counted as the
// creator's) removes them when its manifest leaves them out, and the
// pinned-runtime policy refuses the removal. The keep-pin webhook restores
// them, so the apply is a no-op and its dry run (kubectl diff, a GitOps
// diff) shows no change.

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

// KeepPin restores in tj, an update of the pinned TrainJob old, the pin
// annotations the update drops, and reports whether it changed tj. Changed
// ones stay, and the pinned-runtime policy refuses them.
func KeepPin(old, tj *trainer.TrainJob) bool {
	if old.Annotations[AnnotationHash] == "" || old.Annotations[AnnotationSource] == "" {
		return false
	}
	changed := false
	for _, k := range []string{AnnotationSource, AnnotationHash} {
		if _, ok := tj.Annotations[k]; !ok {
			if tj.Annotations == nil {
				tj.Annotations = map[string]string{}
			}
			tj.Annotations[k] = old.Annotations[k]
			changed = true
		}
	}
	return changed
}

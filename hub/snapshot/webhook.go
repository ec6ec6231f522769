package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	kueueconstants "sigs.k8s.io/kueue/pkg/controller/constants"
	"sigs.k8s.io/kueue/pkg/controller/jobframework"
	kueuetrainjob "sigs.k8s.io/kueue/pkg/controller/jobs/trainjob"
)

// WebhookPath is where the hub serves the pinning webhook.
const WebhookPath = "/mutate-trainer-kubeflow-org-v1alpha1-trainjob-pin-runtime"

// PinWebhook pins the runtime of every queued TrainJob at creation, and
// does there what Kueue's own TrainJob webhook did before trainyard took
// over Kueue's TrainJob integration (hub/kueuejob): it validates the job as
// Kueue does at creation and suspends it until Kueue admits it.
type PinWebhook struct {
	// Reader reads the source runtime live: a runtime edited a moment ago
	// must be pinned as edited.
	Reader client.Reader
	// Client writes pinned copies; its cache, when it has one, is asked
	// first for a fresh copy, and Kueue's suspend rule reads the job's
	// owners through it.
	Client client.Client
	// Clock stamps the pinned-at annotation (default: the real clock).
	Clock clock.PassiveClock
	// RestampAfter: a pinned copy stamped less than this ago is reused
	// without a write (0: every job stamps it). Keep it a small share of
	// the collector's grace period; RestampAfterFor gives the hub's.
	RestampAfter time.Duration
}

// RestampAfterFor is the RestampAfter the hub uses beside a collector of
// grace period grace (0: DefaultGCGracePeriod): a tenth of it.
func RestampAfterFor(grace time.Duration) time.Duration {
	if grace <= 0 {
		grace = DefaultGCGracePeriod
	}
	return grace / 10
}

// Handle answers one admission request.
func (w *PinWebhook) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create {
		return admission.Allowed("")
	}
	var tj trainer.TrainJob
	if err := json.Unmarshal(req.Object.Raw, &tj); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if tj.Namespace == "" {
		tj.Namespace = req.Namespace
	}
	before := tj.DeepCopy()
	if err := refusePreset(&tj); err != nil {
		return admission.Denied(err.Error())
	}
	if errs := jobframework.ValidateJobOnCreate((*kueuetrainjob.TrainJob)(&tj)); len(errs) > 0 {
		return admission.Denied(errs.ToAggregate().Error())
	}
	if err := w.suspendUntilAdmitted(ctx, &tj); err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if !ptr.Deref(req.DryRun, false) {
		// Pinning creates an object; a dry run must not.
		if resp, pinned := w.pin(ctx, &tj); !pinned {
			return resp
		}
	}
	return patchResponse(req.Object.Raw, before, &tj)
}

// suspendUntilAdmitted suspends tj, as Kueue's TrainJob webhook does for
// a queued job, so nothing runs it before Kueue admits it.
func (w *PinWebhook) suspendUntilAdmitted(ctx context.Context, tj *trainer.TrainJob) error {
	suspend, err := jobframework.WorkloadShouldBeSuspended(ctx, tj, w.Client, false, nil)
	if err != nil {
		return err
	}
	if suspend {
		(*kueuetrainjob.TrainJob)(tj).Suspend()
	}
	return nil
}

// pin pins tj, answering the request itself when it cannot.
func (w *PinWebhook) pin(ctx context.Context, tj *trainer.TrainJob) (admission.Response, bool) {
	now := time.Now()
	if w.Clock != nil {
		now = w.Clock.Now()
	}
	var cache client.Reader
	if w.Client != nil {
		cache = w.Client
	}
	_, err := pinAt(ctx, w.Reader, w.Client, tj, reuse{now: now, within: w.RestampAfter, cache: cache})
	if err == nil {
		return admission.Response{}, true
	}
	if errors.Is(err, ErrRuntimeNotFound) || errors.Is(err, ErrUnsupportedRuntime) || errors.Is(err, ErrPinnedCopyMismatch) ||
		errors.Is(err, ErrSnapshotMismatch) {
		return admission.Denied("trainyard cannot pin the runtime of this TrainJob: " + err.Error()), false
	}
	return admission.Errored(http.StatusInternalServerError, err), false
}

// WebhookConfiguration registers the hub's TrainJob webhooks served at
// base (scheme://host:port) with caBundle, for TrainJobs that carry a Kueue
// queue label:
//   - the pinning webhook on CREATE fails closed: a queued TrainJob is never
//     created with an unpinned runtime. It is never reinvoked: a
//     reinvocation would see the pin annotations it set itself, which it
//     cannot tell from ones a tenant wrote;
//   - the keep-pin webhook on UPDATE (see KeepPin) is asked only when an
//     update of a pinned job touches what it keeps, and fails open: with
//     the hub down a re-apply may be refused by the pinned-runtime policy
//     or suspend an admitted job, nothing worse.
func WebhookConfiguration(base string, caBundle []byte) *admissionregv1.MutatingWebhookConfiguration {
	pin, keep := base+WebhookPath, base+KeepPinWebhookPath
	rule := func(op admissionregv1.OperationType) []admissionregv1.RuleWithOperations {
		return []admissionregv1.RuleWithOperations{{
			Operations: []admissionregv1.OperationType{op},
			Rule: admissionregv1.Rule{APIGroups: []string{trainer.GroupVersion.Group}, APIVersions: []string{"v1alpha1"},
				Resources: []string{"trainjobs"}},
		}}
	}
	queued := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: kueueconstants.QueueLabel, Operator: metav1.LabelSelectorOpExists,
	}}}
	return &admissionregv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "trainyard-pin-runtime"},
		Webhooks: []admissionregv1.MutatingWebhook{{
			Name:                    "pin-runtime.trainyard.dev",
			AdmissionReviewVersions: []string{"v1"},
			ClientConfig:            admissionregv1.WebhookClientConfig{URL: &pin, CABundle: caBundle},
			Rules:                   rule(admissionregv1.Create),
			ObjectSelector:          queued,
			FailurePolicy:           ptr.To(admissionregv1.Fail),
			SideEffects:             ptr.To(admissionregv1.SideEffectClassNoneOnDryRun),
			ReinvocationPolicy:      ptr.To(admissionregv1.NeverReinvocationPolicy),
			TimeoutSeconds:          ptr.To[int32](10),
		}, {
			Name:                    "keep-pin.trainyard.dev",
			AdmissionReviewVersions: []string{"v1"},
			ClientConfig:            admissionregv1.WebhookClientConfig{URL: &keep, CABundle: caBundle},
			Rules:                   rule(admissionregv1.Update),
			ObjectSelector:          queued,
			MatchConditions:         []admissionregv1.MatchCondition{{Name: "pinned-and-touched", Expression: celTouchesPin}},
			FailurePolicy:           ptr.To(admissionregv1.Ignore),
			SideEffects:             ptr.To(admissionregv1.SideEffectClassNone),
			ReinvocationPolicy:      ptr.To(admissionregv1.NeverReinvocationPolicy),
			TimeoutSeconds:          ptr.To[int32](5),
		}},
	}
}

// celTouchesPin: the old TrainJob is pinned and the update drops a pin
// annotation or Kueue's runtime patch, or suspends the job: all KeepPin
// ever restores.
const celTouchesPin = `has(oldObject.metadata.annotations) && 'trainyard.dev/runtime-hash' in oldObject.metadata.annotations && ` +
	`(!has(object.metadata.annotations) || ` +
	`!('trainyard.dev/runtime-hash' in object.metadata.annotations) || !('trainyard.dev/runtime-source' in object.metadata.annotations) || ` +
	`(has(oldObject.spec.runtimePatches) && oldObject.spec.runtimePatches.exists(p, p.manager == 'kueue.x-k8s.io/manager') && ` +
	`!(has(object.spec.runtimePatches) && object.spec.runtimePatches.exists(p, p.manager == 'kueue.x-k8s.io/manager'))) || ` +
	`((!has(oldObject.spec.suspend) || !oldObject.spec.suspend) && has(object.spec.suspend) && object.spec.suspend))`

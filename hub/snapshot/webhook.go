package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// WebhookPath is where the hub serves the pinning webhook.
const WebhookPath = "/mutate-trainer-kubeflow-org-v1alpha1-trainjob-pin-runtime"

// QueueLabel selects the TrainJobs Kueue (and so trainyard) manages.
const QueueLabel = "kueue.x-k8s.io/queue-name"

// PinWebhook pins the runtime of every queued TrainJob at creation.
type PinWebhook struct {
	Reader client.Reader
	Writer client.Writer
	// Cache, when set, is an informer-backed reader the webhook waits on
	// until the pinned copy is visible: Kueue's TrainJob webhook checks the
	// runtime exists through its own informer cache, which is fed by the
	// same API server watch, and refuses the job if the copy is not there yet.
	Cache client.Reader
	// Clock stamps AnnotationPinnedAt (default: the real clock).
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

// visibleTimeout bounds the wait for a new pinned copy to reach the caches.
const visibleTimeout = 5 * time.Second

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
	if err := refusePreset(&tj); err != nil {
		return admission.Denied(err.Error())
	}
	if ptr.Deref(req.DryRun, false) {
		// Pinning creates an object; a dry run must not.
		return admission.Allowed("dry run: runtime not pinned")
	}
	var now time.Time
	if w.Clock != nil {
		now = w.Clock.Now()
	} else {
		now = time.Now()
	}
	if err := pinAt(ctx, w.Reader, w.Writer, &tj, reuse{now: now, within: w.RestampAfter, cache: w.Cache}); err != nil {
		if errors.Is(err, ErrRuntimeNotFound) || errors.Is(err, ErrUnsupportedRuntime) || errors.Is(err, ErrPinnedCopyMismatch) ||
			errors.Is(err, ErrSnapshotMismatch) {
			return admission.Denied("trainyard cannot pin the runtime of this TrainJob: " + err.Error())
		}
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if w.Cache != nil {
		if err := waitVisible(ctx, w.Cache, client.ObjectKey{Namespace: tj.Namespace, Name: tj.Spec.RuntimeRef.Name}); err != nil {
			return admission.Errored(http.StatusServiceUnavailable, err)
		}
	}
	raw, err := json.Marshal(&tj)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, raw)
}

func waitVisible(ctx context.Context, cache client.Reader, key client.ObjectKey) error {
	ctx, cancel := context.WithTimeout(ctx, visibleTimeout)
	defer cancel()
	for {
		err := cache.Get(ctx, key, &trainer.TrainingRuntime{})
		if err == nil {
			return nil
		}
		if !apierrors.IsNotFound(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pinned runtime %s not visible after %s", key, visibleTimeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// WebhookConfiguration registers the pinning webhook at url with caBundle,
// for TrainJobs that carry a Kueue queue label. It fails closed: a queued
// TrainJob is never created with an unpinned runtime. It is never
// reinvoked: a reinvocation would see the pin annotations it set itself,
// which it cannot tell from ones a tenant wrote.
func WebhookConfiguration(url string, caBundle []byte) *admissionregv1.MutatingWebhookConfiguration {
	return &admissionregv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "trainyard-pin-runtime"},
		Webhooks: []admissionregv1.MutatingWebhook{{
			Name:                    "pin-runtime.trainyard.dev",
			AdmissionReviewVersions: []string{"v1"},
			ClientConfig:            admissionregv1.WebhookClientConfig{URL: &url, CABundle: caBundle},
			Rules: []admissionregv1.RuleWithOperations{{
				Operations: []admissionregv1.OperationType{admissionregv1.Create},
				Rule: admissionregv1.Rule{APIGroups: []string{trainer.GroupVersion.Group}, APIVersions: []string{"v1alpha1"},
					Resources: []string{"trainjobs"}},
			}},
			ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: QueueLabel, Operator: metav1.LabelSelectorOpExists,
			}}},
			FailurePolicy:      ptr.To(admissionregv1.Fail),
			SideEffects:        ptr.To(admissionregv1.SideEffectClassNoneOnDryRun),
			ReinvocationPolicy: ptr.To(admissionregv1.NeverReinvocationPolicy),
			TimeoutSeconds:     ptr.To[int32](10),
		}},
	}
}

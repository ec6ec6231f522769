package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
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
	// Probe, when set, is asked for a dry-run create of the pinned job
	// before the webhook answers, while the copy is younger than
	// probeWindow: Kueue's TrainJob webhook (and Trainer's, where it runs)
	// later in the same admission chain reads the runtime from its own
	// informer cache, which a copy made a moment ago may not have reached
	// yet. The dry run goes through those webhooks, so a job is answered
	// only once they see its copy, and the first job of a new runtime is
	// never refused for it.
	Probe client.Writer
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
	created, err := pinAt(ctx, w.Reader, w.Writer, &tj, reuse{now: now, within: w.RestampAfter, cache: w.Cache})
	if err != nil {
		if errors.Is(err, ErrRuntimeNotFound) || errors.Is(err, ErrUnsupportedRuntime) || errors.Is(err, ErrPinnedCopyMismatch) ||
			errors.Is(err, ErrSnapshotMismatch) {
			return admission.Denied("trainyard cannot pin the runtime of this TrainJob: " + err.Error())
		}
		return admission.Errored(http.StatusInternalServerError, err)
	}
	deadline, cancel := context.WithTimeout(ctx, visibleTimeout)
	defer cancel()
	if w.Cache != nil {
		if err := waitVisible(deadline, w.Cache, client.ObjectKey{Namespace: tj.Namespace, Name: tj.Spec.RuntimeRef.Name}); err != nil {
			return admission.Errored(http.StatusServiceUnavailable, err)
		}
	}
	if w.Probe != nil && now.Sub(created) < probeWindow {
		if err := probeAdmission(deadline, w.Probe, &tj); err != nil {
			return admission.Errored(http.StatusServiceUnavailable, err)
		}
	}
	raw, err := json.Marshal(&tj)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, raw)
}

// probeWindow is how long after its creation a pinned copy is probed for:
// far longer than any informer takes to see an object.
const probeWindow = 30 * time.Second

// Dry-run creates of the job being pinned, to see it through the rest of
// the admission chain (probeAdmission); nothing is stored.
//
// +kubebuilder:rbac:groups=trainer.kubeflow.org,resources=trainjobs,verbs=create

// probeAdmission dry-runs the create of tj until no webhook says its
// runtime is not found, or ctx ends. Any other answer ends the probe: the
// real create meets the same one and reports it.
func probeAdmission(ctx context.Context, c client.Writer, tj *trainer.TrainJob) error {
	probe := tj.DeepCopy()
	probe.ResourceVersion, probe.UID = "", ""
	// Without the pin annotations, so this webhook lets the dry run through.
	delete(probe.Annotations, AnnotationSource)
	delete(probe.Annotations, AnnotationHash)
	for {
		err := c.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		if err == nil || !mentionsMissing(err, tj.Spec.RuntimeRef.Name) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pinned runtime %s not seen by the admission chain after %s: %v", tj.Spec.RuntimeRef.Name, visibleTimeout, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// mentionsMissing: err says the runtime name is not found, as Kueue's
// TrainJob webhook words it ("runtime '<name>' not found").
func mentionsMissing(err error, name string) bool {
	msg := err.Error()
	return strings.Contains(msg, name) && strings.Contains(msg, "not found")
}

func waitVisible(ctx context.Context, cache client.Reader, key client.ObjectKey) error {
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

// WebhookConfiguration registers the hub's TrainJob webhooks served at
// base (scheme://host:port) with caBundle, for TrainJobs that carry a Kueue
// queue label:
//   - the pinning webhook on CREATE fails closed: a queued TrainJob is never
//     created with an unpinned runtime. It is never reinvoked: a
//     reinvocation would see the pin annotations it set itself, which it
//     cannot tell from ones a tenant wrote;
//   - the keep-pin webhook on UPDATE (see KeepPin) is asked only when an
//     update of a pinned job touches what pinning set, and fails open: with
//     the hub down a re-apply is refused as immutable, nothing worse, and
//     Kueue's own updates of TrainJobs never wait for the hub.
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
		Key: QueueLabel, Operator: metav1.LabelSelectorOpExists,
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

// celTouchesPin: the old TrainJob is pinned and the update changes its
// runtimeRef, drops a pin annotation or drops trainer.numNodes, which is
// all KeepPin ever restores.
const celTouchesPin = `has(oldObject.metadata.annotations) && 'trainyard.dev/runtime-hash' in oldObject.metadata.annotations && ` +
	`(object.spec.runtimeRef != oldObject.spec.runtimeRef || !has(object.metadata.annotations) || ` +
	`!('trainyard.dev/runtime-hash' in object.metadata.annotations) || !('trainyard.dev/runtime-source' in object.metadata.annotations) || ` +
	`(has(oldObject.spec.trainer) && has(oldObject.spec.trainer.numNodes) && !(has(object.spec.trainer) && has(object.spec.trainer.numNodes))))`

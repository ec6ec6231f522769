package snapshot

import (
	"context"
	"fmt"
	"strings"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Pinning. Kueue v0.19 computes a TrainJob's pod sets from the live runtime
// every time it reconciles the job, and evicts the job when they change; and
// a TrainJob's runtimeRef is immutable once created. So trainyard pins the
// runtime when the TrainJob is created: it copies the referenced runtime
// into an immutable, content-addressed TrainingRuntime in the job's
// namespace and points the job at the copy. Kueue's pod sets, the Dispatch
// snapshot and the remote render then all read the same spec, and editing or
// deleting the original runtime reaches no job already submitted.
const (
	// LabelPinned marks pinned runtime copies; the pinned-runtime policy
	// refuses any change to their spec.
	LabelPinned = "trainyard.dev/pinned-runtime"
	// AnnotationSource on a TrainJob and its pinned runtime names the
	// runtime the copy was taken from, as Kind/name.
	AnnotationSource = "trainyard.dev/runtime-source"
	// AnnotationHash is the pinned spec's content hash.
	AnnotationHash = "trainyard.dev/runtime-hash"
)

// Pin makes tj refer to a pinned copy of its runtime, creating the copy if
// needed. It changes tj in memory only; the webhook returns the change as a
// patch. A TrainJob already pointing at a pinned copy is left as it is.
// The source runtime is read through r, which should be uncached: a runtime
// edited a moment ago must be pinned as edited.
func Pin(ctx context.Context, r client.Reader, c client.Writer, tj *trainer.TrainJob) error {
	if tj.Annotations[AnnotationSource] != "" {
		return nil
	}
	snap, err := Take(ctx, r, tj)
	if err != nil {
		return err
	}
	name := pinnedName(snap.Name, snap.Hash)
	var spec trainer.TrainingRuntimeSpec
	if err := decodeSpec(snap.Spec.Raw, &spec); err != nil {
		return err
	}
	source := fmt.Sprintf("%s/%s", snap.Kind, snap.Name)
	pinned := &trainer.TrainingRuntime{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: tj.Namespace,
			Labels:      map[string]string{LabelPinned: "true"},
			Annotations: map[string]string{AnnotationSource: source, AnnotationHash: snap.Hash},
		},
		Spec: spec,
	}
	if err := c.Create(ctx, pinned); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("pin runtime %s: %w", source, err)
	}
	defaultFluxNodes(tj, &spec)
	tj.Spec.RuntimeRef = trainer.RuntimeRef{
		Name: name, APIGroup: ptr.To(trainer.GroupVersion.Group), Kind: ptr.To(trainer.TrainingRuntimeKind),
	}
	if tj.Annotations == nil {
		tj.Annotations = map[string]string{}
	}
	tj.Annotations[AnnotationSource] = source
	tj.Annotations[AnnotationHash] = snap.Hash
	return nil
}

// pinnedName is the copy's name: the source's, shortened, and the hash, so
// equal content is shared and different content never collides.
func pinnedName(source, hash string) string {
	h := strings.TrimPrefix(hash, "sha256:")[:12]
	if len(source) > 50 {
		source = strings.TrimRight(source[:50], "-.")
	}
	return source + "-" + h
}

// PinnedRuntimePolicy is a ValidatingAdmissionPolicy, with its binding,
// that refuses changes to a pinned runtime's spec. It needs no webhook: the
// API server enforces it even while the hub is down.
func PinnedRuntimePolicy() (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	name := "trainyard-pinned-runtimes"
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{
				ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelPinned: "true"}},
				ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Update},
					Rule: admissionv1.Rule{APIGroups: []string{trainer.GroupVersion.Group}, APIVersions: []string{"*"},
						Resources: []string{"trainingruntimes"}},
				}}},
			},
			Validations: []admissionv1.Validation{{
				Expression: "object.spec == oldObject.spec",
				Message:    "this TrainingRuntime is a trainyard pinned copy used by submitted TrainJobs; its spec cannot change (edit the source runtime instead)",
			}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		},
	}
	return policy, binding
}

// defaultFluxNodes fills a Flux job's spec.trainer.numNodes from its
// runtime when the job leaves it unset, as the Trainer docs write Flux jobs.
// Trainer v2.3's Flux plugin dereferences it, and Kueue runs that plugin in
// its TrainJob webhook on the hub: without the default such a job is refused
// with a nil-pointer panic. The value is the one the runtime gives anyway.
func defaultFluxNodes(tj *trainer.TrainJob, spec *trainer.TrainingRuntimeSpec) {
	if spec.MLPolicy == nil || spec.MLPolicy.Flux == nil {
		return
	}
	if tj.Spec.Trainer == nil {
		tj.Spec.Trainer = &trainer.Trainer{}
	}
	if tj.Spec.Trainer.NumNodes == nil {
		tj.Spec.Trainer.NumNodes = ptr.To(ptr.Deref(spec.MLPolicy.NumNodes, 1))
	}
}

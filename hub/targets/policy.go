package targets

import (
	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/internal/admission"
)

// The Dispatch writer policy. An agent's hub role (AgentRBAC) must patch
// Dispatches, for RemoteCleanupFinalizer, and write their status; RBAC
// cannot narrow either to one field or to one Target's Dispatches. The API
// server enforces the rest itself, whoever holds such rights:
//   - a caller may change the metadata of a Dispatch other than that one
//     finalizer (labels the hub selects by, annotations it relays logs
//     through, owners, other finalizers) only if it may update the virtual
//     resource dispatchmetadata.trainyard.dev there (the hub; cluster
//     administrators through their wildcard);
//   - a caller writes a Dispatch, or its status, only if it may update the
//     status of the Target the Dispatch names (the hub, and that Target's
//     agent: its role names its Target).
//
// The spec of a Dispatch is immutable already (CEL on the CRD).

// The hub relays log requests through a Dispatch's annotations, and
// releases the finalizer of Dispatches whose target is lost:
//
// +kubebuilder:rbac:groups=trainyard.dev,resources=dispatchmetadata,verbs=update

const (
	// DispatchWriterPolicyName names the policy and its binding.
	DispatchWriterPolicyName = "trainyard-dispatch-writers"
	// DispatchMetadataResource is the virtual resource whose update verb
	// lets a caller change a Dispatch's labels, annotations, owners and
	// finalizers.
	DispatchMetadataResource = "dispatchmetadata"
)

// Policy expressions.
const (
	celMayChangeMetadata = `authorizer.group('trainyard.dev').resource('dispatchmetadata').namespace(request.namespace).check('update').allowed()`
	// celOnlyCleanupFinalizer holds for a status write, which cannot
	// change metadata, and for a write that changes nothing of the
	// metadata but RemoteCleanupFinalizer.
	celOnlyCleanupFinalizer = `(has(request.subResource) && request.subResource == 'status') || (` +
		`object.metadata.?labels.orValue({}) == oldObject.metadata.?labels.orValue({}) && ` +
		`object.metadata.?annotations.orValue({}) == oldObject.metadata.?annotations.orValue({}) && ` +
		`object.metadata.?ownerReferences.orValue([]) == oldObject.metadata.?ownerReferences.orValue([]) && ` +
		`object.metadata.?finalizers.orValue([]).filter(f, f != '` + v1alpha1.RemoteCleanupFinalizer + `') == ` +
		`oldObject.metadata.?finalizers.orValue([]).filter(f, f != '` + v1alpha1.RemoteCleanupFinalizer + `'))`
	celWritesItsTarget = `authorizer.group('trainyard.dev').resource('targets').subresource('status').name(oldObject.spec.targetName).check('update').allowed()`
)

// Denial messages of the policy (docs/troubleshooting.md lists them).
const (
	MsgDispatchMetadata = "a Dispatch's labels, annotations, owners and finalizers are the hub's; " +
		"an agent may add or remove only the finalizer " + v1alpha1.RemoteCleanupFinalizer
	MsgDispatchOfOtherTarget = "a Dispatch is written only by the hub and by the agent of the Target it names"
)

// DispatchWriterPolicy is the ValidatingAdmissionPolicy, with its binding,
// described above. The hub chart (templates/dispatch-writer-policy.yaml)
// and config/hub ship it (test/integration/charts checks they match).
func DispatchWriterPolicy() (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: DispatchWriterPolicyName},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{
				ResourceRules: []admissionv1.NamedRuleWithOperations{
					admission.Rule(v1alpha1.GroupVersion.Group, []string{"dispatches", "dispatches/status"}, admissionv1.Update)},
			},
			Validations: []admissionv1.Validation{
				{Expression: celOnlyCleanupFinalizer + " || " + celMayChangeMetadata, Message: MsgDispatchMetadata,
					Reason: ptr.To(metav1.StatusReasonForbidden)},
				{Expression: celWritesItsTarget, Message: MsgDispatchOfOtherTarget, Reason: ptr.To(metav1.StatusReasonForbidden)},
			},
		},
	}
	return policy, admission.DenyBinding(DispatchWriterPolicyName)
}

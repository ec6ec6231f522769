package snapshot

import (
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainyard-dev/trainyard/internal/admission"
)

// The pinned-runtime policy. The API server enforces it itself, even while
// the hub is down, on every TrainingRuntime that carries a pin label or
// annotation (whoever set them) and on every TrainJob:
//   - a pinned copy's spec, pin annotations and label never change, so a
//     copy cannot be unmarked and then edited;
//   - a pinned copy is deleted only by a caller allowed to delete the
//     virtual resource pinnedruntimes.trainyard.dev (the hub's collector,
//     which deletes only unreferenced copies), or with its namespace;
//   - a TrainJob's pin annotations never change after creation (the
//     webhook refuses them at creation on queued jobs, the policy on jobs
//     created without the queue label, which the webhook never sees);
//   - a TrainJob that is not pinned is never added to a Kueue queue: it
//     was created without the queue label, and since the pin annotations
//     are set only at creation, labelling it later cannot pin it. Kueue allows the label while a job is
//     suspended, so without this rule such a job would be queued naming a
//     live runtime (the hub refuses to dispatch it anyway: snapshot.Take);
//   - a TrainJob's queue label does not change while the job runs (not
//     suspended), as Kueue's own TrainJob webhook refused before trainyard
//     took over the integration (hub/kueuejob).

// Deleting pinned copies, as the policy's authorizer check asks:
//
// +kubebuilder:rbac:groups=trainyard.dev,resources=pinnedruntimes,verbs=delete

const (
	// PinnedRuntimePolicyName names the policy and its binding.
	PinnedRuntimePolicyName = "trainyard-pinned-runtimes"
	// PinnedRuntimesResource is the virtual resource whose delete verb
	// lets a caller delete pinned copies.
	PinnedRuntimesResource = "pinnedruntimes"
)

// Policy expressions. pinValue(o, k) would be a function if CEL had them.
const (
	celIsPinnedOrJob = `request.resource.resource == 'trainjobs' || ` +
		`(has(oldObject.metadata.annotations) && ('trainyard.dev/runtime-hash' in oldObject.metadata.annotations || 'trainyard.dev/runtime-source' in oldObject.metadata.annotations)) || ` +
		`(has(oldObject.metadata.labels) && 'trainyard.dev/pinned-runtime' in oldObject.metadata.labels)`
	celSpecUnchanged = `request.resource.resource != 'trainingruntimes' || request.operation != 'UPDATE' || object.spec == oldObject.spec`
	celPinUnchanged  = `request.operation != 'UPDATE' || ['trainyard.dev/runtime-source', 'trainyard.dev/runtime-hash'].all(k, ` +
		`(has(object.metadata.annotations) && k in object.metadata.annotations ? object.metadata.annotations[k] : '<none>') == ` +
		`(has(oldObject.metadata.annotations) && k in oldObject.metadata.annotations ? oldObject.metadata.annotations[k] : '<none>'))`
	celLabelUnchanged = `request.resource.resource != 'trainingruntimes' || request.operation != 'UPDATE' || ` +
		`(has(object.metadata.labels) && 'trainyard.dev/pinned-runtime' in object.metadata.labels ? object.metadata.labels['trainyard.dev/pinned-runtime'] : '<none>') == ` +
		`(has(oldObject.metadata.labels) && 'trainyard.dev/pinned-runtime' in oldObject.metadata.labels ? oldObject.metadata.labels['trainyard.dev/pinned-runtime'] : '<none>')`
	celPinOnlyQueued = `request.operation != 'CREATE' || (has(object.metadata.labels) && 'kueue.x-k8s.io/queue-name' in object.metadata.labels) || ` +
		`!has(object.metadata.annotations) || !(['trainyard.dev/runtime-source', 'trainyard.dev/runtime-hash'].exists(k, k in object.metadata.annotations))`
	celQueuedIsPinned = `request.resource.resource != 'trainjobs' || request.operation != 'UPDATE' || ` +
		`!(has(object.metadata.labels) && 'kueue.x-k8s.io/queue-name' in object.metadata.labels) || ` +
		`(has(oldObject.metadata.labels) && 'kueue.x-k8s.io/queue-name' in oldObject.metadata.labels) || ` +
		`(has(object.metadata.annotations) && 'trainyard.dev/runtime-hash' in object.metadata.annotations)`
	celQueueKeptWhileRunning = `request.resource.resource != 'trainjobs' || request.operation != 'UPDATE' || ` +
		`(has(object.spec.suspend) && object.spec.suspend) || ` +
		`(has(object.metadata.labels) && 'kueue.x-k8s.io/queue-name' in object.metadata.labels ? object.metadata.labels['kueue.x-k8s.io/queue-name'] : '<none>') == ` +
		`(has(oldObject.metadata.labels) && 'kueue.x-k8s.io/queue-name' in oldObject.metadata.labels ? oldObject.metadata.labels['kueue.x-k8s.io/queue-name'] : '<none>')`
	celDeleteAllowed = `request.operation != 'DELETE' || has(namespaceObject.metadata.deletionTimestamp) || ` +
		`authorizer.group('trainyard.dev').resource('pinnedruntimes').namespace(request.namespace).check('delete').allowed()`
)

// Denial messages of the policy (docs/troubleshooting.md lists them).
const (
	MsgSpecImmutable     = "this TrainingRuntime is a trainyard pinned copy used by submitted TrainJobs; its spec cannot change (edit the source runtime instead)"
	MsgPinImmutable      = "the trainyard.dev/runtime-source and trainyard.dev/runtime-hash annotations are set by trainyard when it pins a runtime and cannot be added, changed or removed"
	MsgLabelKept         = "the trainyard.dev/pinned-runtime label of a pinned copy cannot be changed or removed"
	MsgDeleteRefused     = "this TrainingRuntime is a trainyard pinned copy; trainyard deletes it once no TrainJob refers to it"
	MsgPinPreset         = "the trainyard.dev/runtime-source and trainyard.dev/runtime-hash annotations are set by trainyard when it pins the runtime of a TrainJob created with the kueue.x-k8s.io/queue-name label; remove them (a manifest copied from an existing TrainJob carries them)"
	MsgQueueWhileRunning = "the kueue.x-k8s.io/queue-name label of a TrainJob cannot change while the job runs; suspend it first"
	MsgQueueUnpinned     = "a TrainJob created without the kueue.x-k8s.io/queue-name label cannot be added to a queue later: trainyard pins a job's runtime only when the job is created with the label, and a job with an unpinned runtime is never dispatched; delete this TrainJob and create it again with the label"
)

// PinnedRuntimePolicy is the ValidatingAdmissionPolicy, with its binding,
// described above. It needs no webhook.
func PinnedRuntimePolicy() (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	rule := func(resource string, ops ...admissionv1.OperationType) admissionv1.NamedRuleWithOperations {
		return admission.Rule(trainer.GroupVersion.Group, []string{resource}, ops...)
	}
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: PinnedRuntimePolicyName},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{
				ResourceRules: []admissionv1.NamedRuleWithOperations{
					rule("trainingruntimes", admissionv1.Update, admissionv1.Delete),
					rule("trainjobs", admissionv1.Create, admissionv1.Update),
				},
			},
			MatchConditions: []admissionv1.MatchCondition{{Name: "pinned-runtime-or-trainjob", Expression: celIsPinnedOrJob}},
			Validations: []admissionv1.Validation{
				{Expression: celSpecUnchanged, Message: MsgSpecImmutable},
				{Expression: celPinUnchanged, Message: MsgPinImmutable},
				{Expression: celLabelUnchanged, Message: MsgLabelKept},
				{Expression: celPinOnlyQueued, Message: MsgPinPreset},
				{Expression: celQueuedIsPinned, Message: MsgQueueUnpinned},
				{Expression: celQueueKeptWhileRunning, Message: MsgQueueWhileRunning},
				{Expression: celDeleteAllowed, Message: MsgDeleteRefused, Reason: ptr.To(metav1.StatusReasonForbidden)},
			},
		},
	}
	return policy, admission.DenyBinding(PinnedRuntimePolicyName)
}

package tenantview

import (
	"context"
	"fmt"
	"slices"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/internal/admission"
)

// RequesterPolicyName names the policy, and its binding, that makes a
// LogRequest's spec.requester the user who creates it. The spec is
// immutable (CEL on the CRD), so the hub can authorize the request as
// spec.requester.
const RequesterPolicyName = "trainyard-logrequest-requester"

// MsgRequesterMismatch is the policy's denial message.
const MsgRequesterMismatch = "spec.requester must be the user creating the LogRequest, with only groups that user is in " +
	"(the trainyard CLI fills it in from a SelfSubjectReview)"

// celRequesterIsCreator: the username is the creator's, and every group
// claimed is one of the creator's (claiming fewer can only allow less).
const celRequesterIsCreator = `object.spec.requester.username == request.userInfo.username && ` +
	`(!has(object.spec.requester.groups) || object.spec.requester.groups.all(g, has(request.userInfo.groups) && g in request.userInfo.groups))`

// RequesterPolicy returns the ValidatingAdmissionPolicy, with its binding,
// that checks spec.requester on LogRequest creation. It needs no webhook.
// The hub chart (templates/logrequest-policy.yaml) and config/hub ship it
// (test/integration/charts checks they match); the hub only reads it.
func RequesterPolicy() (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: RequesterPolicyName},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{
				ResourceRules: []admissionv1.NamedRuleWithOperations{
					admission.Rule(v1alpha1.GroupVersion.Group, []string{"logrequests"}, admissionv1.Create)},
			},
			Validations: []admissionv1.Validation{{
				Expression: celRequesterIsCreator, Message: MsgRequesterMismatch, Reason: ptr.To(metav1.StatusReasonForbidden),
			}},
		},
	}
	return policy, admission.DenyBinding(RequesterPolicyName)
}

// policyMissing says why LogRequests cannot be trusted when the requester
// policy or its binding is not installed as RequesterPolicy makes them (the
// hub chart and config/hub ship them; the hub only reads them), "" when it
// is. Without it, or with a weakened copy, any tenant could name anyone as
// requester, so the relay then denies every request (fail closed).
func policyMissing(ctx context.Context, c client.Reader) (string, error) {
	var (
		policy  admissionv1.ValidatingAdmissionPolicy
		binding admissionv1.ValidatingAdmissionPolicyBinding
	)
	for _, o := range []client.Object{&policy, &binding} {
		if err := c.Get(ctx, client.ObjectKey{Name: RequesterPolicyName}, o); apierrors.IsNotFound(err) {
			return fmt.Sprintf("the hub's admission policy %s is not installed, so the requester of a LogRequest cannot be trusted; "+
				"an administrator installs it with the hub chart (or config/default)", RequesterPolicyName), nil
		} else if err != nil {
			return "", fmt.Errorf("read the admission policy %s: %w", RequesterPolicyName, err)
		}
	}
	wantPolicy, wantBinding := RequesterPolicy()
	// DeepDerivative: fields the API server defaults and RequesterPolicy
	// leaves unset do not count; every field it sets must be as it sets it.
	if !equality.Semantic.DeepDerivative(wantPolicy.Spec, policy.Spec) {
		return fmt.Sprintf("the hub's admission policy %s differs from the one the hub chart ships, so the requester of a LogRequest "+
			"cannot be trusted; an administrator reinstalls it with the hub chart (or config/default)", RequesterPolicyName), nil
	}
	if binding.Spec.PolicyName != wantBinding.Spec.PolicyName || !slices.Contains(binding.Spec.ValidationActions, admissionv1.Deny) ||
		narrowed(binding.Spec.MatchResources) {
		return fmt.Sprintf("the binding %s of the hub's admission policy does not deny with policy %s everywhere, as the hub chart ships it",
			RequesterPolicyName, RequesterPolicyName), nil
	}
	return "", nil
}

// narrowed reports whether a binding's matchResources leave some
// LogRequests out of the policy (the chart's binding sets none).
func narrowed(m *admissionv1.MatchResources) bool {
	if m == nil {
		return false
	}
	empty := func(s *metav1.LabelSelector) bool {
		return s == nil || (len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0)
	}
	return !empty(m.NamespaceSelector) || !empty(m.ObjectSelector) || len(m.ResourceRules) > 0 || len(m.ExcludeResourceRules) > 0
}

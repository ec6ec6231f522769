// Package admission builds the pieces the hub's ValidatingAdmissionPolicies
// share, so each policy package writes only its own rules and expressions.
package admission

import (
	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DenyBinding binds the policy of that name cluster-wide, denying what it
// refuses. Binding and policy share the name.
func DenyBinding(policy string) *admissionv1.ValidatingAdmissionPolicyBinding {
	return &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		},
	}
}

// Rule matches ops on resources of group, at every version.
func Rule(group string, resources []string, ops ...admissionv1.OperationType) admissionv1.NamedRuleWithOperations {
	return admissionv1.NamedRuleWithOperations{RuleWithOperations: admissionv1.RuleWithOperations{
		Operations: ops,
		Rule:       admissionv1.Rule{APIGroups: []string{group}, APIVersions: []string{"*"}, Resources: resources},
	}}
}

package tenantview

import (
	"context"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
)

// TestPolicyMissing: the relay trusts a LogRequest's requester only while
// the policy and binding are installed as the chart ships them; a missing,
// weakened or narrowed one fails closed, with a reason that says so.
func TestPolicyMissing(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(p *admissionv1.ValidatingAdmissionPolicy, b *admissionv1.ValidatingAdmissionPolicyBinding) (keepPolicy, keepBinding bool)
		want string
	}{
		{name: "as shipped", want: ""},
		{name: "as shipped, with API server defaults and an audit action",
			edit: func(p *admissionv1.ValidatingAdmissionPolicy, b *admissionv1.ValidatingAdmissionPolicyBinding) (bool, bool) {
				p.Spec.MatchConstraints.MatchPolicy = ptr.To(admissionv1.Equivalent)
				p.Spec.MatchConstraints.NamespaceSelector = &metav1.LabelSelector{}
				b.Spec.ValidationActions = append(b.Spec.ValidationActions, admissionv1.Audit)
				b.Spec.MatchResources = &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{}}
				return true, true
			}, want: ""},
		{name: "no policy", edit: func(*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) (bool, bool) {
			return false, true
		}, want: "is not installed"},
		{name: "no binding", edit: func(*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) (bool, bool) {
			return true, false
		}, want: "is not installed"},
		{name: "weakened expression", edit: func(p *admissionv1.ValidatingAdmissionPolicy, _ *admissionv1.ValidatingAdmissionPolicyBinding) (bool, bool) {
			p.Spec.Validations[0].Expression = "true"
			return true, true
		}, want: "differs from the one the hub chart ships"},
		{name: "fail open", edit: func(p *admissionv1.ValidatingAdmissionPolicy, _ *admissionv1.ValidatingAdmissionPolicyBinding) (bool, bool) {
			p.Spec.FailurePolicy = ptr.To(admissionv1.Ignore)
			return true, true
		}, want: "differs from the one the hub chart ships"},
		{name: "binding only warns", edit: func(_ *admissionv1.ValidatingAdmissionPolicy, b *admissionv1.ValidatingAdmissionPolicyBinding) (bool, bool) {
			b.Spec.ValidationActions = []admissionv1.ValidationAction{admissionv1.Warn}
			return true, true
		}, want: "does not deny"},
		{name: "binding skips namespaces", edit: func(_ *admissionv1.ValidatingAdmissionPolicy, b *admissionv1.ValidatingAdmissionPolicyBinding) (bool, bool) {
			b.Spec.MatchResources = &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"checked": "yes"}}}
			return true, true
		}, want: "does not deny"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, b := RequesterPolicy()
			keepP, keepB := true, true
			if tc.edit != nil {
				keepP, keepB = tc.edit(p, b)
			}
			builder := fake.NewClientBuilder().WithScheme(kube.Scheme())
			if keepP {
				builder = builder.WithObjects(p)
			}
			if keepB {
				builder = builder.WithObjects(b)
			}
			why, err := policyMissing(context.Background(), builder.Build())
			if err != nil {
				t.Fatal(err)
			}
			if (tc.want == "") != (why == "") || !strings.Contains(why, tc.want) {
				t.Errorf("policyMissing = %q, want %q", why, tc.want)
			}
		})
	}
}

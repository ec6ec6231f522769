package tenantview

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/trainyard-dev/trainyard/test/harness/kube"
)

func TestPolicyInstallerInstallsAndRestores(t *testing.T) {
	ctx := context.Background()
	weakened, _ := RequesterPolicy()
	weakened.Spec.Validations[0].Expression = "true"
	c := fake.NewClientBuilder().WithScheme(kube.Scheme()).WithObjects(weakened).Build()
	p := &PolicyInstaller{Client: c, Reader: c}
	if err := p.install(ctx); err != nil {
		t.Fatal(err)
	}
	want, wantBinding := RequesterPolicy()
	var policy admissionv1.ValidatingAdmissionPolicy
	var binding admissionv1.ValidatingAdmissionPolicyBinding
	if err := c.Get(ctx, client.ObjectKey{Name: RequesterPolicyName}, &policy); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: RequesterPolicyName}, &binding); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want.Spec, policy.Spec); diff != "" {
		t.Errorf("policy not restored (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantBinding.Spec, binding.Spec); diff != "" {
		t.Errorf("binding (-want +got):\n%s", diff)
	}
	if why, err := policyMissing(ctx, c); err != nil || why != "" {
		t.Errorf("policyMissing after install = %q, %v", why, err)
	}
}

package tenantview

import (
	"context"
	"fmt"
	"slices"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
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
func RequesterPolicy() (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: RequesterPolicyName},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{
				ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule: admissionv1.Rule{APIGroups: []string{v1alpha1.GroupVersion.Group}, APIVersions: []string{"*"},
						Resources: []string{"logrequests"}},
				}}},
			},
			Validations: []admissionv1.Validation{{
				Expression: celRequesterIsCreator, Message: MsgRequesterMismatch, Reason: ptr.To(metav1.StatusReasonForbidden),
			}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: RequesterPolicyName},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        RequesterPolicyName,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		},
	}
	return policy, binding
}

// policyMissing says why LogRequests cannot be trusted when the requester
// policy or its binding is not installed as RequesterPolicy makes them, ""
// when it is. Without it any tenant could name anyone as requester, so the
// relay then denies every request (fail closed).
func policyMissing(ctx context.Context, c client.Reader) (string, error) {
	var (
		policy  admissionv1.ValidatingAdmissionPolicy
		binding admissionv1.ValidatingAdmissionPolicyBinding
	)
	for _, o := range []client.Object{&policy, &binding} {
		if err := c.Get(ctx, client.ObjectKey{Name: RequesterPolicyName}, o); apierrors.IsNotFound(err) {
			return fmt.Sprintf("the hub's admission policy %s is not installed, so the requester of a LogRequest cannot be trusted; "+
				"an administrator installs it with the hub chart", RequesterPolicyName), nil
		} else if err != nil {
			return "", err
		}
	}
	if binding.Spec.PolicyName != RequesterPolicyName || !slices.Contains(binding.Spec.ValidationActions, admissionv1.Deny) {
		return fmt.Sprintf("the binding %s of the hub's admission policy does not deny with policy %s", RequesterPolicyName, RequesterPolicyName), nil
	}
	return "", nil
}

// PolicyInstaller keeps the requester policy and its binding installed as
// RequesterPolicy makes them, so a hub installed by any means (chart,
// kustomize, tests) has it: LogRequests are denied until it is.
type PolicyInstaller struct {
	// Client writes; Reader reads uncached (the hub may get these objects,
	// not list or watch them).
	Client client.Client
	Reader client.Reader
	// Retry is the wait after a failed attempt (default 30s).
	Retry time.Duration
}

// Start installs the policy, retrying until it succeeds or ctx ends.
func (p *PolicyInstaller) Start(ctx context.Context) error {
	retry := p.Retry
	if retry <= 0 {
		retry = 30 * time.Second
	}
	return wait.PollUntilContextCancel(ctx, retry, true, func(ctx context.Context) (bool, error) {
		if err := p.install(ctx); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "install the LogRequest requester policy; LogRequests are denied until it is installed")
			return false, nil
		}
		return true, nil
	})
}

// NeedLeaderElection is false: every replica may install the same objects.
func (p *PolicyInstaller) NeedLeaderElection() bool { return false }

func (p *PolicyInstaller) install(ctx context.Context) error {
	policy, binding := RequesterPolicy()
	for _, want := range []client.Object{policy, binding} {
		have := want.DeepCopyObject().(client.Object)
		err := p.Reader.Get(ctx, client.ObjectKeyFromObject(want), have)
		switch {
		case apierrors.IsNotFound(err):
			err = p.Client.Create(ctx, want)
		case err == nil && !sameSpec(have, want):
			want.SetResourceVersion(have.GetResourceVersion())
			err = p.Client.Update(ctx, want)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func sameSpec(a, b client.Object) bool {
	switch a := a.(type) {
	case *admissionv1.ValidatingAdmissionPolicy:
		return equality.Semantic.DeepDerivative(b.(*admissionv1.ValidatingAdmissionPolicy).Spec, a.Spec)
	case *admissionv1.ValidatingAdmissionPolicyBinding:
		return equality.Semantic.DeepDerivative(b.(*admissionv1.ValidatingAdmissionPolicyBinding).Spec, a.Spec)
	}
	return false
}

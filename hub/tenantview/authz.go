package tenantview

import (
	"context"
	"fmt"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	authzv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// LogSubresource is the authorization-only subresource of trainjobs that
// reading a TrainJob's output takes, beside get on the TrainJob itself, as
// pods/log is to pods: an administrator can let a team see jobs without
// their output. No API serves it; RBAC rules name it like any other.
const LogSubresource = "log"

// checks are the SubjectAccessReviews a LogRequest needs, all allowed.
func checks(lr *v1alpha1.LogRequest) []authzv1.ResourceAttributes {
	base := authzv1.ResourceAttributes{
		Namespace: lr.Namespace, Verb: "get", Group: trainer.GroupVersion.Group,
		Resource: "trainjobs", Name: lr.Spec.TrainJobName,
	}
	log := base
	log.Subresource = LogSubresource
	return []authzv1.ResourceAttributes{base, log}
}

// authorize asks the API server whether lr's requester may read its
// TrainJob's output. It returns "" when allowed, else why not.
func authorize(ctx context.Context, c client.Client, lr *v1alpha1.LogRequest) (string, error) {
	for _, attrs := range checks(lr) {
		sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User: lr.Spec.Requester.Username, Groups: lr.Spec.Requester.Groups, ResourceAttributes: &attrs,
		}}
		if err := c.Create(ctx, sar); err != nil {
			return "", fmt.Errorf("subject access review: %w", err)
		}
		if !sar.Status.Allowed {
			what := "get trainjobs"
			if attrs.Subresource != "" {
				what += "/" + attrs.Subresource
			}
			return fmt.Sprintf("user %q may not %s %q in namespace %q", lr.Spec.Requester.Username, what, attrs.Name, attrs.Namespace), nil
		}
	}
	return "", nil
}

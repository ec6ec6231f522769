package statusapi

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kubeflow/trainer/v2/pkg/statusserver"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
)

// Extra keys the API server sets on a pod-bound service-account token's
// review.
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
)

// TokenReviewAuth accepts the projected service-account tokens of a
// Kubernetes spoke's pods, as Trainer's server does, but through a
// TokenReview against the spoke's API server rather than its OIDC keys: the
// audience must be the hub TrainJob's (statusserver.TokenAudience), the
// token bound to a pod that still exists, and that pod one the agent made
// for a Dispatch (its trainyard labels, which the agent writes over any a
// tenant sets, name the Dispatch and attempt).
type TokenReviewAuth struct {
	// Spoke creates TokenReviews and reads pods on the spoke.
	Spoke client.Client
	// Hub reads the agent's Dispatches.
	Hub client.Reader
}

// Authenticate reviews token for the audience of the TrainJob ns/name.
func (a TokenReviewAuth) Authenticate(ctx context.Context, token, ns, name string) (Caller, error) {
	audience := statusserver.TokenAudience(ns, name)
	review := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{audience}}}
	if err := a.Spoke.Create(ctx, review); err != nil {
		return Caller{}, fmt.Errorf("token review: %w", err)
	}
	st := review.Status
	if !st.Authenticated || !slices.Contains(st.Audiences, audience) {
		return Caller{}, ErrBadToken
	}
	pod, err := a.boundPod(ctx, st.User)
	if err != nil || pod == nil {
		return Caller{}, err
	}
	l := pod.Labels
	if l[backends.LabelManagedBy] != backends.ManagedByValue || l[v1alpha1.LabelDispatchNamespace] == "" || l[v1alpha1.LabelDispatchName] == "" {
		return Caller{}, ErrBadToken
	}
	attempt, err := strconv.ParseInt(l[backends.LabelAttempt], 10, 32)
	if err != nil {
		return Caller{}, ErrBadToken
	}
	var d v1alpha1.Dispatch
	if err := a.Hub.Get(ctx, client.ObjectKey{Namespace: l[v1alpha1.LabelDispatchNamespace], Name: l[v1alpha1.LabelDispatchName]}, &d); err != nil {
		if apierrors.IsNotFound(err) {
			return Caller{}, ErrBadToken
		}
		return Caller{}, err
	}
	// Labels can be copied; the namespace the agent made the work in
	// cannot.
	if d.Status.Remote == nil || d.Status.Remote.Namespace != pod.Namespace {
		return Caller{}, ErrBadToken
	}
	return Caller{Dispatch: d.UID, Attempt: int32(attempt)}, nil
}

// boundPod is the live pod a reviewed token is bound to, or nil (with
// ErrBadToken) when there is none: a token not bound to a pod, or one of a
// pod since deleted or replaced under its name.
func (a TokenReviewAuth) boundPod(ctx context.Context, u authenticationv1.UserInfo) (*corev1.Pod, error) {
	podNS, ok := strings.CutPrefix(u.Username, "system:serviceaccount:")
	podNS, _, ok2 := strings.Cut(podNS, ":")
	names, uids := u.Extra[extraPodName], u.Extra[extraPodUID]
	if !ok || !ok2 || len(names) != 1 || len(uids) != 1 {
		return nil, ErrBadToken
	}
	var pod corev1.Pod
	if err := a.Spoke.Get(ctx, client.ObjectKey{Namespace: podNS, Name: names[0]}, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, ErrBadToken
		}
		return nil, err
	}
	if string(pod.UID) != uids[0] {
		return nil, ErrBadToken
	}
	return &pod, nil
}

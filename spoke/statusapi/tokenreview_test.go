package statusapi

import (
	"context"
	"errors"
	"testing"

	"github.com/kubeflow/trainer/v2/pkg/statusserver"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
)

const jobsNS = "jobs-team-a"

// spokeReviewing is a spoke whose API server reviews every token as
// status says, holding pods.
func spokeReviewing(status authenticationv1.TokenReviewStatus, pods ...client.Object) client.Client {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	return fake.NewClientBuilder().WithScheme(s).WithObjects(pods...).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if r, ok := obj.(*authenticationv1.TokenReview); ok {
				r.Status = status
				return nil
			}
			return c.Create(ctx, obj, opts...)
		},
	}).Build()
}

func jobPod(ns, name, uid string, d *v1alpha1.Dispatch) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("pod-" + uid), Labels: backends.RemoteLabels(d)}}
}

func reviewed(ns, pod, podUID string, audiences ...string) authenticationv1.TokenReviewStatus {
	return authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: audiences, User: authenticationv1.UserInfo{
		Username: "system:serviceaccount:" + ns + ":default",
		Extra:    map[string]authenticationv1.ExtraValue{extraPodName: {pod}, extraPodUID: {podUID}},
	}}
}

func TestTokenReviewAuth(t *testing.T) {
	d := running("train")
	d.Status.Remote = &v1alpha1.RemoteRef{Kind: "JobSet", Namespace: jobsNS, Name: "train-1"}
	s := runtime.NewScheme()
	utilruntime.Must(v1alpha1.AddToScheme(s))
	hub := fake.NewClientBuilder().WithScheme(s).WithObjects(d).Build()
	aud := statusserver.TokenAudience("team-a", "train")
	unlabelled := jobPod(jobsNS, "stray", "stray", d)
	unlabelled.Labels = nil
	otherNS := jobPod("jobs-team-b", "copy", "copy", d)
	gone := d.DeepCopy()
	gone.Name = "gone"
	cases := map[string]struct {
		status authenticationv1.TokenReviewStatus
		pods   []client.Object
		want   Caller
	}{
		"the pod of the job's attempt": {status: reviewed(jobsNS, "p0", "pod-p0", aud),
			pods: []client.Object{jobPod(jobsNS, "p0", "p0", d)}, want: Caller{Dispatch: d.UID, Attempt: 2}},
		"not authenticated":       {status: authenticationv1.TokenReviewStatus{}, pods: []client.Object{jobPod(jobsNS, "p0", "p0", d)}},
		"another audience":        {status: reviewed(jobsNS, "p0", "pod-p0", statusserver.TokenAudience("team-a", "other")), pods: []client.Object{jobPod(jobsNS, "p0", "p0", d)}},
		"not bound to a pod":      {status: authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{aud}, User: authenticationv1.UserInfo{Username: "system:serviceaccount:" + jobsNS + ":default"}}},
		"pod gone":                {status: reviewed(jobsNS, "p0", "pod-p0", aud)},
		"pod replaced":            {status: reviewed(jobsNS, "p0", "pod-old", aud), pods: []client.Object{jobPod(jobsNS, "p0", "p0", d)}},
		"pod not the agent's":     {status: reviewed(jobsNS, "stray", "pod-stray", aud), pods: []client.Object{unlabelled}},
		"labels copied elsewhere": {status: reviewed("jobs-team-b", "copy", "pod-copy", aud), pods: []client.Object{otherNS}},
		"Dispatch gone":           {status: reviewed(jobsNS, "g0", "pod-g0", aud), pods: []client.Object{jobPod(jobsNS, "g0", "g0", gone)}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			a := TokenReviewAuth{Spoke: spokeReviewing(tc.status, tc.pods...), Hub: hub}
			got, err := a.Authenticate(context.Background(), "token", "team-a", "train")
			if tc.want == (Caller{}) {
				if !errors.Is(err, ErrBadToken) {
					t.Errorf("Authenticate = %+v, %v; want ErrBadToken", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("Authenticate = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

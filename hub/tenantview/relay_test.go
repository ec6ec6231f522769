package tenantview

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

var t0 = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

// sarRecorder answers SubjectAccessReviews with allow(attrs) and records them.
type sarRecorder struct {
	allow func(authzv1.ResourceAttributes) bool
	seen  []authzv1.SubjectAccessReviewSpec
}

func (r *sarRecorder) create(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
	sar, ok := obj.(*authzv1.SubjectAccessReview)
	if !ok {
		return c.Create(ctx, obj, opts...)
	}
	r.seen = append(r.seen, sar.Spec)
	sar.Status.Allowed = r.allow(*sar.Spec.ResourceAttributes)
	return nil
}

// world is tenant team-a's TrainJob "llama" running as attempt 2 of its
// Workload, Dispatch llama-2 in agent namespace agents-1 (llama-1 is the
// old attempt).
func world() []client.Object {
	tj := tytesting.MakeTrainJob("llama", "team-a").Obj()
	tj.UID = "tj-uid"
	wl := &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Name: "wl-llama", Namespace: "team-a", UID: "wl-uid",
		Annotations: map[string]string{v1alpha1.AnnotationAttempt: "2"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: trainer.GroupVersion.String(), Kind: trainer.TrainJobKind,
			Name: "llama", UID: "tj-uid", Controller: ptr.To(true)}}}}
	d := func(attempt int32) *v1alpha1.Dispatch {
		o := tytesting.MakeDispatch("llama-"+string(rune('0'+attempt)), "agents-1", "spoke-1").Attempt(attempt).WorkloadUID("wl-uid").Obj()
		o.Spec.Workload.Name = "wl-llama"
		o.Labels = map[string]string{v1alpha1.LabelWorkloadUID: "wl-uid"}
		return o
	}
	policy, binding := RequesterPolicy()
	return []client.Object{tj, wl, d(1), d(2), policy, binding}
}

func logRequest(job string) *v1alpha1.LogRequest {
	return &v1alpha1.LogRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "req", Namespace: "team-a", UID: "lr-uid", CreationTimestamp: metav1.Time{Time: t0}},
		Spec: v1alpha1.LogRequestSpec{TrainJobName: job, TailLines: 5, Replica: "node-0-1",
			Requester: v1alpha1.Requester{Username: "alice", Groups: []string{"team-a", "system:authenticated"}}},
	}
}

type fixture struct {
	relay *Relay
	c     client.Client
	clock *clocktesting.FakeClock
	sars  *sarRecorder
}

func newFixture(t *testing.T, allow func(authzv1.ResourceAttributes) bool, objs ...client.Object) *fixture {
	t.Helper()
	sars := &sarRecorder{allow: allow}
	c := fake.NewClientBuilder().WithScheme(kube.Scheme()).WithObjects(objs...).
		WithStatusSubresource(&v1alpha1.LogRequest{}).
		WithInterceptorFuncs(interceptor.Funcs{Create: sars.create}).Build()
	clk := clocktesting.NewFakeClock(t0)
	return &fixture{relay: &Relay{Client: c, Answers: c, Clock: clk, TTL: time.Minute, AnswerTimeout: 10 * time.Second}, c: c, clock: clk, sars: sars}
}

func (f *fixture) reconcile(t *testing.T) (ctrl.Result, *v1alpha1.LogRequest) {
	t.Helper()
	res, err := f.relay.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "req"}})
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	var lr v1alpha1.LogRequest
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: "team-a", Name: "req"}, &lr); apierrors.IsNotFound(err) {
		return res, nil
	} else if err != nil {
		t.Fatal(err)
	}
	return res, &lr
}

func (f *fixture) dispatch(t *testing.T, name string) *v1alpha1.Dispatch {
	t.Helper()
	var d v1alpha1.Dispatch
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: "agents-1", Name: name}, &d); err != nil {
		t.Fatal(err)
	}
	return &d
}

func allowAll(authzv1.ResourceAttributes) bool { return true }

func TestAuthorizeAsksAsTheRequester(t *testing.T) {
	f := newFixture(t, allowAll, append(world(), logRequest("llama"))...)
	f.reconcile(t)
	attrs := func(sub string) *authzv1.ResourceAttributes {
		return &authzv1.ResourceAttributes{Namespace: "team-a", Verb: "get", Group: "trainer.kubeflow.org",
			Resource: "trainjobs", Subresource: sub, Name: "llama"}
	}
	groups := []string{"team-a", "system:authenticated"}
	want := []authzv1.SubjectAccessReviewSpec{
		{User: "alice", Groups: groups, ResourceAttributes: attrs("")},
		{User: "alice", Groups: groups, ResourceAttributes: attrs(LogSubresource)},
	}
	if diff := cmp.Diff(want, f.sars.seen); diff != "" {
		t.Errorf("SubjectAccessReviews (-want +got):\n%s", diff)
	}
}

func TestDenied(t *testing.T) {
	cases := map[string]func(authzv1.ResourceAttributes) bool{
		"no get on the TrainJob": func(a authzv1.ResourceAttributes) bool { return false },
		"no trainjobs/log":       func(a authzv1.ResourceAttributes) bool { return a.Subresource == "" },
	}
	for name, allow := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, allow, append(world(), logRequest("llama"))...)
			_, lr := f.reconcile(t)
			if lr.Status.Phase != v1alpha1.LogRequestDenied || !strings.Contains(lr.Status.Message, `user "alice" may not get trainjobs`) {
				t.Errorf("status = %+v, want Denied naming the user", lr.Status)
			}
			if lr.Status.Target != "" || lr.Status.CompletionTime == nil {
				t.Errorf("status = %+v, want no target and a completion time", lr.Status)
			}
			if a := f.dispatch(t, "llama-2").Annotations[v1alpha1.AnnotationLogsRequest]; a != "" {
				t.Errorf("denied request relayed: %s", a)
			}
		})
	}
}

func TestDeniedWithoutTheRequesterPolicy(t *testing.T) {
	objs := world()
	objs = objs[:len(objs)-1] // no binding
	f := newFixture(t, allowAll, append(objs, logRequest("llama"))...)
	_, lr := f.reconcile(t)
	if lr.Status.Phase != v1alpha1.LogRequestDenied || !strings.Contains(lr.Status.Message, "cannot be trusted") {
		t.Errorf("status = %+v, want Denied: policy missing", lr.Status)
	}
	if len(f.sars.seen) != 0 {
		t.Errorf("asked %d SubjectAccessReviews without the policy", len(f.sars.seen))
	}
}

func TestRelayAndAnswer(t *testing.T) {
	f := newFixture(t, allowAll, append(world(), logRequest("llama"))...)
	res, lr := f.reconcile(t)
	if lr.Status.Phase != v1alpha1.LogRequestPending || lr.Status.Target != "spoke-1" || lr.Status.RelayedAt == nil || res.RequeueAfter == 0 {
		t.Fatalf("after relay: %+v, %+v; want Pending on spoke-1, polling", lr.Status, res)
	}
	var ask v1alpha1.LogsRequest
	if err := json.Unmarshal([]byte(f.dispatch(t, "llama-2").Annotations[v1alpha1.AnnotationLogsRequest]), &ask); err != nil {
		t.Fatal(err)
	}
	want := v1alpha1.LogsRequest{ID: "lr-uid", LogRequest: "team-a/req", Replica: "node-0-1", TailLines: 5,
		Deadline: &metav1.Time{Time: t0.Add(10 * time.Second)}}
	if diff := cmp.Diff(want, ask); diff != "" {
		t.Errorf("request on the live Dispatch (-want +got):\n%s", diff)
	}
	if a := f.dispatch(t, "llama-1").Annotations[v1alpha1.AnnotationLogsRequest]; a != "" {
		t.Errorf("old attempt asked: %s", a)
	}
	// No answer yet: keep polling.
	if res, lr = f.reconcile(t); lr.Status.Phase != v1alpha1.LogRequestPending || res.RequeueAfter == 0 {
		t.Fatalf("before the answer: %+v, %+v", lr.Status, res)
	}
	answer := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "agents-1", Name: v1alpha1.LogsAnswerName("llama-2"),
		Annotations: map[string]string{v1alpha1.AnnotationLogsRequestID: "lr-uid", v1alpha1.AnnotationLogsSource: "pod p",
			v1alpha1.AnnotationLogsTruncated: "true"}},
		Data: map[string]string{v1alpha1.LogsDataKey: "step 9\n"}}
	if err := f.c.Create(context.Background(), answer); err != nil {
		t.Fatal(err)
	}
	res, lr = f.reconcile(t)
	wantStatus := v1alpha1.LogRequestStatus{Phase: v1alpha1.LogRequestAnswered, Target: "spoke-1", Source: "pod p", Truncated: true,
		Log: "step 9\n", RelayedAt: &metav1.Time{Time: t0}, CompletionTime: &metav1.Time{Time: t0}}
	if diff := cmp.Diff(wantStatus, lr.Status); diff != "" {
		t.Errorf("answered status (-want +got):\n%s", diff)
	}
	if res.RequeueAfter != time.Minute {
		t.Errorf("requeue after %v, want the TTL", res.RequeueAfter)
	}
	err := f.c.Get(context.Background(), client.ObjectKeyFromObject(answer), &corev1.ConfigMap{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("answer left in the agent namespace: %v", err)
	}
	if a := f.dispatch(t, "llama-2").Annotations[v1alpha1.AnnotationLogsRequest]; a != "" {
		t.Errorf("request left on the Dispatch: %s", a)
	}
	// Collected after its TTL.
	f.clock.Step(time.Minute)
	if _, lr = f.reconcile(t); lr != nil {
		t.Errorf("LogRequest kept after its TTL: %+v", lr.Status)
	}
}

func TestFailures(t *testing.T) {
	cases := []struct {
		name    string
		job     string
		prepare func(*testing.T, *fixture)
		want    string
	}{
		{name: "no such TrainJob", job: "other", want: `trainjob "other" not found in namespace "team-a"`},
		{name: "agent silent", job: "llama", want: "the agent of target spoke-1 did not answer within 10s",
			prepare: func(t *testing.T, f *fixture) { f.reconcile(t); f.clock.Step(10 * time.Second) }},
		{name: "agent error", job: "llama", want: "target spoke-1: no pods", prepare: func(t *testing.T, f *fixture) {
			f.reconcile(t)
			_ = f.c.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "agents-1",
				Name: v1alpha1.LogsAnswerName("llama-2"), Annotations: map[string]string{
					v1alpha1.AnnotationLogsRequestID: "lr-uid", v1alpha1.AnnotationLogsError: "no pods"}}})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, allowAll, append(world(), logRequest(tc.job))...)
			if tc.prepare != nil {
				tc.prepare(t, f)
			}
			_, lr := f.reconcile(t)
			if lr.Status.Phase != v1alpha1.LogRequestFailed || lr.Status.Message != tc.want {
				t.Errorf("status = %+v, want Failed: %s", lr.Status, tc.want)
			}
			if a := f.dispatch(t, "llama-2").Annotations[v1alpha1.AnnotationLogsRequest]; a != "" {
				t.Errorf("request left on the Dispatch: %s", a)
			}
		})
	}
}

func TestWaitsForAnotherPendingRequest(t *testing.T) {
	objs := world()
	other, _ := json.Marshal(v1alpha1.LogsRequest{ID: "other", Deadline: &metav1.Time{Time: t0.Add(5 * time.Second)}})
	objs[3].SetAnnotations(map[string]string{v1alpha1.AnnotationLogsRequest: string(other)})
	f := newFixture(t, allowAll, append(objs, logRequest("llama"))...)
	res, lr := f.reconcile(t)
	if lr.Status.RelayedAt != nil || res.RequeueAfter == 0 || f.dispatch(t, "llama-2").Annotations[v1alpha1.AnnotationLogsRequest] != string(other) {
		t.Fatalf("relayed over a pending request: %+v", lr.Status)
	}
	f.clock.Step(5 * time.Second) // the other one's deadline passed
	if _, lr = f.reconcile(t); lr.Status.RelayedAt == nil {
		t.Errorf("not relayed after the other request's deadline: %+v", lr.Status)
	}
}

// TestAnswerKeptWhereTheHubMayNotDelete: without the hub's Role of
// targets.AgentRBAC in the agent namespace, deleting the answer is
// Forbidden; the tenant still gets it and the Dispatch is released.
func TestAnswerKeptWhereTheHubMayNotDelete(t *testing.T) {
	f := newFixture(t, allowAll, append(world(), logRequest("llama"))...)
	forbidden := func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
		if _, ok := obj.(*corev1.ConfigMap); ok {
			return apierrors.NewForbidden(corev1.Resource("configmaps"), obj.GetName(), errors.New("no RBAC"))
		}
		return c.Delete(ctx, obj, opts...)
	}
	f.relay.Client = interceptor.NewClient(f.c.(client.WithWatch), interceptor.Funcs{Delete: forbidden})
	f.reconcile(t)
	answer := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "agents-1", Name: v1alpha1.LogsAnswerName("llama-2"),
		Annotations: map[string]string{v1alpha1.AnnotationLogsRequestID: "lr-uid"}},
		Data: map[string]string{v1alpha1.LogsDataKey: "step 9\n"}}
	if err := f.c.Create(context.Background(), answer); err != nil {
		t.Fatal(err)
	}
	_, lr := f.reconcile(t)
	if lr.Status.Phase != v1alpha1.LogRequestAnswered || lr.Status.Log != "step 9\n" {
		t.Errorf("status = %+v, want Answered with the output", lr.Status)
	}
	if a := f.dispatch(t, "llama-2").Annotations[v1alpha1.AnnotationLogsRequest]; a != "" {
		t.Errorf("request left on the Dispatch: %s", a)
	}
}

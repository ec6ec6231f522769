package dashboard

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueuetesting "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/hubview"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

const (
	addr    = "127.0.0.1:7480"
	secret  = "hf_s3cr3t-value"
	llamaUI = "uid-llama"
)

// hubObjects: spoke-1 and hpc, team-a/llama running on spoke-1 (rack-a)
// with a secret in its env and an event, team-a/mnist queued, and a
// ClusterQueue with usage.
func hubObjects() []client.Object {
	hpc := tytesting.MakeSlurmTarget("hpc", "h100", "gpu").Obj()
	llama := tytesting.MakeTrainJob("llama", "team-a").Queue("lq").NumNodes(2).GPUsPerNode(4).Obj()
	llama.UID, llama.CreationTimestamp = llamaUI, metav1.Time{Time: now.Add(-time.Hour)}
	llama.Spec.Trainer.Env = []corev1.EnvVar{{Name: "HF_TOKEN", Value: secret}}
	llama.Status.Conditions = []metav1.Condition{{Type: "Running", Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonRemoteRunning,
		Message: "running on target spoke-1 (attempt 1)", LastTransitionTime: metav1.Time{Time: now.Add(-time.Minute)}}}
	wl := kueuetesting.MakeWorkload("trainjob-llama-1", "team-a").
		ControllerReference(trainer.GroupVersion.WithKind(trainer.TrainJobKind), "llama", llamaUI).Obj()
	wl.UID = "uid-wl-llama"
	wl.Annotations = map[string]string{v1alpha1.AnnotationAttempt: "1"}
	d := tytesting.MakeDispatch("llama-1", "trainyard-spoke-1", "spoke-1").WorkloadUID(wl.UID).
		PodSets(v1alpha1.PodSetPlacement{Name: "node", Count: 2, GPUsPerPod: 4, Topology: inRack([]string{"rack-a"})}).Obj()
	d.Spec.Workload.Namespace, d.Spec.Workload.Name = "team-a", wl.Name
	d.Labels = map[string]string{v1alpha1.LabelWorkloadUID: string(wl.UID), v1alpha1.LabelWorkloadNamespace: "team-a"}
	d.Status = v1alpha1.DispatchStatus{Phase: v1alpha1.DispatchRunning, Remote: &v1alpha1.RemoteRef{Kind: "JobSet", Namespace: "jobs", Name: "ty-llama-1"}}
	// Three points of history, and a newer report: four points a curve.
	llama.Status.TrainerStatus = &trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](42), EstimatedRemainingSeconds: ptr.To[int32](600),
		Metrics: []trainer.Metric{{Name: "loss", Value: "0.8"}}, LastUpdatedTime: metav1.Time{Time: now.Add(-time.Minute)}}
	d.Status.ProgressHistory = &v1alpha1.ProgressHistory{StepSeconds: 60, Metrics: []string{"loss"}}
	for i, loss := range []string{"2.5", "1.5", "1"} {
		d.Status.ProgressHistory.Points = append(d.Status.ProgressHistory.Points, v1alpha1.ProgressPoint{
			Time: metav1.Time{Time: now.Add(time.Duration(i-4) * time.Minute)}, ProgressPercentage: ptr.To(int32(10 * i)), Values: []string{loss}})
	}
	raw, _ := json.Marshal(d.Status.ProgressHistory)
	llama.Annotations = map[string]string{v1alpha1.AnnotationProgressHistory: string(raw)}
	mnist := tytesting.MakeTrainJob("mnist", "team-a").Queue("lq").Obj()
	mnist.UID = "uid-mnist"
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "llama.1", Namespace: "team-a"},
		InvolvedObject: corev1.ObjectReference{Kind: trainer.TrainJobKind, Name: "llama", UID: llamaUI},
		Type:           corev1.EventTypeNormal, Reason: "Dispatched", Message: "attempt 1 to target spoke-1", Count: 1,
		LastTimestamp: metav1.Time{Time: now.Add(-time.Minute)}}
	q := cq("team-a", "research", "16", "8", "0", "8")
	return []client.Object{spoke(), hpc, llama, wl, d, mnist, ev, &q}
}

// newFake is a hub holding hubObjects, with funcs intercepting calls.
func newFake(funcs interceptor.Funcs) client.WithWatch {
	return fake.NewClientBuilder().WithScheme(hubview.Scheme()).WithObjects(hubObjects()...).
		WithStatusSubresource(&v1alpha1.Target{}, &v1alpha1.Dispatch{}, &trainer.TrainJob{}).
		WithIndex(&corev1.Event{}, "involvedObject.uid", func(o client.Object) []string {
			return []string{string(o.(*corev1.Event).InvolvedObject.UID)}
		}).WithInterceptorFuncs(funcs).Build()
}

// forbid refuses lists of the given kinds, cluster-wide only when
// clusterWide is set.
func forbid(clusterWide bool, kinds ...client.ObjectList) interceptor.Funcs {
	return interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, l client.ObjectList, opts ...client.ListOption) error {
		lo := (&client.ListOptions{}).ApplyOptions(opts)
		for _, k := range kinds {
			if sameType(k, l) && (!clusterWide || lo.Namespace == "") {
				return apierrors.NewForbidden(schema.GroupResource{Resource: "things"}, "", nil)
			}
		}
		return c.List(ctx, l, opts...)
	}}
}

func sameType(a, b any) bool { return reflect.TypeOf(a) == reflect.TypeOf(b) }

type request struct {
	method, path, host string
	header             map[string]string
}

type response struct {
	status  int
	has     []string
	hasNot  []string
	partial bool
}

func serve(t *testing.T, c client.Client, r request) (int, string) {
	t.Helper()
	h, err := NewHandler(Options{Client: c, Namespace: "team-a", Clock: clocktesting.NewFakePassiveClock(now), LogsTimeout: 2 * time.Second}, addr)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(cmpOr(r.method, http.MethodGet), r.path, nil)
	req.Host = cmpOr(r.host, addr)
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body)
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func check(t *testing.T, status int, body string, want response) {
	t.Helper()
	if status != want.status {
		t.Errorf("status = %d, want %d; body:\n%s", status, want.status, body)
	}
	for _, s := range want.has {
		if !strings.Contains(body, s) {
			t.Errorf("body lacks %q:\n%s", s, body)
		}
	}
	for _, s := range append(want.hasNot, secret) {
		if strings.Contains(body, s) {
			t.Errorf("body has %q", s)
		}
	}
	if full := strings.Contains(body, "<html"); want.status == http.StatusOK && full == want.partial {
		t.Errorf("whole page = %v, want %v", full, !want.partial)
	}
}

func TestPages(t *testing.T) {
	cases := map[string]struct {
		req   request
		funcs interceptor.Funcs
		want  response
	}{
		"fleet map, quota and placed job": {req: request{path: "/"}, want: response{status: 200, has: []string{
			`data-target="spoke-1"`, `data-target="hpc"`, `data-domain="rack-a"`, `data-node="n2" data-free="4" data-used="4"`,
			`<li data-job="team-a/llama">`, `data-percent="42"`, `<span class="pct">42%</span>`, `data-queue="team-a" data-flavor="h100"`, "8 / 16 (50%)", "heartbeat <span class=\"heartbeat\">15s ago",
		}}},
		"fleet content only": {req: request{path: "/?partial=1"}, want: response{status: 200, partial: true, has: []string{`data-target="spoke-1"`}}},
		"targets and queues forbidden": {req: request{path: "/"}, funcs: forbid(false, &v1alpha1.TargetList{}, &kueue.ClusterQueueList{}),
			want: response{status: 200, has: []string{"cannot list Targets", "cannot list ClusterQueues", "No Targets."}}},
		"job list filtered by phase": {req: request{path: "/jobs?phase=Running"}, want: response{status: 200,
			has: []string{`data-job="team-a/llama" data-target="spoke-1" data-phase="Running"`, `<td class="progress">42%</td>`, `<td class="eta">9m</td>`, "1 of 2 jobs"}, hasNot: []string{`data-job="team-a/mnist"`}}},
		"job list in the user's namespace when cluster-wide is forbidden": {req: request{path: "/jobs"}, funcs: forbid(true, &trainer.TrainJobList{}),
			want: response{status: 200, has: []string{"showing namespace team-a only", `data-job="team-a/mnist"`}}},
		"job page": {req: request{path: "/jobs/team-a/llama"}, want: response{status: 200, has: []string{
			`<dl class="placement" data-target="spoke-1">`, "2 pods × 4 GPUs in rack=rack-a (1)", "JobSet jobs/ty-llama-1",
			"running on target spoke-1 (attempt 1)", "Dispatched", "attempt 1 to target spoke-1", `id="fetch-logs"`,
			`<svg class="bar progress"`, `data-percent="42"`, "42%, ETA 9m", "reported 60s ago",
			`<figure class="curve" data-metric="loss" data-points="4">`, `<figure class="curve" data-metric="progress %" data-points="4">`,
		}, hasNot: []string{`class="stale"`}}},
		"job page of a tenant: the history from the TrainJob": {req: request{path: "/jobs/team-a/llama"}, funcs: forbid(false, &v1alpha1.DispatchList{}),
			want: response{status: 200, has: []string{`data-percent="42"`, `<figure class="curve" data-metric="loss" data-points="4">`}}},
		"job page without progress": {req: request{path: "/jobs/team-a/mnist"}, want: response{status: 200,
			has: []string{"No progress reported"}, hasNot: []string{`<figure class="curve"`, `data-percent=`}}},
		"unknown job":                         {req: request{path: "/jobs/team-a/nope"}, want: response{status: 404, has: []string{"not found"}}},
		"other host (DNS rebinding)":          {req: request{path: "/", host: "evil.example:7480"}, want: response{status: 421, hasNot: []string{"spoke-1"}}},
		"localhost":                           {req: request{path: "/jobs", host: "localhost:7480"}, want: response{status: 200, has: []string{"llama"}}},
		"logs without the dashboard's header": {req: request{method: "POST", path: "/jobs/team-a/llama/logs"}, want: response{status: 403}},
		"logs from another origin": {req: request{method: "POST", path: "/jobs/team-a/llama/logs",
			header: map[string]string{"X-Trainyard": "1", "Origin": "http://evil.example"}}, want: response{status: 403}},
		"logs of a job that runs nowhere": {req: request{method: "POST", path: "/jobs/team-a/mnist/logs", header: map[string]string{"X-Trainyard": "1"}},
			funcs: playHub(func(lr *v1alpha1.LogRequest) {
				lr.Status = v1alpha1.LogRequestStatus{Phase: v1alpha1.LogRequestFailed, Message: "trainjob team-a/mnist runs nowhere now"}
			}),
			want: response{status: 502, has: []string{"runs nowhere now"}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			status, body := serve(t, newFake(tc.funcs), tc.req)
			check(t, status, body, tc.want)
		})
	}
}

// playHub answers the SelfSubjectReview of the dashboard's user and
// every LogRequest it creates with answer, as the hub's relay would.
func playHub(answer func(*v1alpha1.LogRequest)) interceptor.Funcs {
	return interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		switch o := obj.(type) {
		case *unstructured.Unstructured:
			if o.GetKind() == "SelfSubjectReview" {
				return unstructured.SetNestedField(o.Object, "alice", "status", "userInfo", "username")
			}
		case *v1alpha1.LogRequest:
			answer(o)
		}
		return c.Create(ctx, obj, opts...)
	}}
}

// TestLogs plays the hub: it answers the LogRequest the dashboard creates
// in the job's namespace.
func TestLogs(t *testing.T) {
	var asked v1alpha1.LogRequestSpec
	c := newFake(playHub(func(lr *v1alpha1.LogRequest) {
		asked = lr.Spec
		lr.Status = v1alpha1.LogRequestStatus{Phase: v1alpha1.LogRequestAnswered, Log: "step 7 loss 0.3\n"}
	}))
	status, body := serve(t, c, request{method: "POST", path: "/jobs/team-a/llama/logs?tail=20", header: map[string]string{"X-Trainyard": "1", "Origin": "http://" + addr}})
	if status != http.StatusOK || body != "step 7 loss 0.3\n" {
		t.Fatalf("logs = %d %q, want the agent's answer", status, body)
	}
	if asked.TailLines != 20 || asked.TrainJobName != "llama" || asked.Requester.Username != "alice" {
		t.Errorf("asked %+v, want 20 lines of llama as alice", asked)
	}
	// The LogRequest is removed once read, as `trainyard logs` does.
	var lrs v1alpha1.LogRequestList
	if err := c.List(context.Background(), &lrs); err != nil || len(lrs.Items) != 0 {
		t.Errorf("LogRequests left: %v, %v", lrs.Items, err)
	}
}

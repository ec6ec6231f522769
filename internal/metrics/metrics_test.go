package metrics

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// TestForgetTarget: a deleted Target's series go from every vector
// labelled by target, and its heartbeat from the scraped gauges; other
// targets keep theirs.
func TestForgetTarget(t *testing.T) {
	Dispatched("gone", ResultDispatched)
	Dispatched("kept", ResultDispatched)
	ObserveAdmissionToRunning("gone", time.Second)
	ObserveAdmissionToRunning("kept", time.Second)
	ObserveDecision("gone", time.Now())
	ObserveDecision("kept", time.Now())
	ObserveHeartbeat("gone", time.Unix(100, 0), time.Minute)
	ObserveHeartbeat("kept", time.Unix(100, 0), time.Minute)

	ForgetTarget("gone")

	for name, v := range map[string]prometheus.Collector{
		"dispatches_total": Dispatches, "admission_to_running_seconds": AdmissionToRunning, "decision_duration_seconds": DecisionDuration,
	} {
		if got := series(t, v, "target", "gone"); got != 0 {
			t.Errorf("%s: %d series of the deleted target remain", name, got)
		}
		if got := series(t, v, "target", "kept"); got == 0 {
			t.Errorf("%s: the other target's series went too", name)
		}
	}
	if _, ok := heartbeats.get("gone"); ok {
		t.Error("the deleted target's heartbeat is still reported")
	}
	if _, ok := heartbeats.get("kept"); !ok {
		t.Error("the other target's heartbeat went too")
	}
	ForgetTarget("kept")
}

// series counts the series of c whose label has value.
func series(t *testing.T, c prometheus.Collector, label, value string) int {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					n++
				}
			}
		}
	}
	return n
}

type fakeBackend struct{}

// TestBackendCall: each call is timed under the backend's package name,
// and only failures count as errors.
func TestBackendCall(t *testing.T) {
	b := &fakeBackend{}
	if got := BackendName(b); got != "metrics" {
		t.Fatalf("BackendName = %q, want the package name %q", got, "metrics")
	}
	if got := BackendName(nil); got != "unknown" {
		t.Errorf("BackendName(nil) = %q, want unknown", got)
	}
	before := testutil.ToFloat64(BackendCallErrors.WithLabelValues("metrics", OpSubmit))
	BackendCall(b, OpSubmit, time.Now(), false)
	BackendCall(b, OpSubmit, time.Now(), true)
	if got := testutil.ToFloat64(BackendCallErrors.WithLabelValues("metrics", OpSubmit)) - before; got != 1 {
		t.Errorf("submit errors rose by %v, want 1", got)
	}
	if n := testutil.CollectAndCount(BackendCallDuration, "trainyard_backend_call_duration_seconds"); n < 1 {
		t.Errorf("no backend call duration series")
	}
	before = testutil.ToFloat64(FenceDeletions)
	FenceDeleted()
	if got := testutil.ToFloat64(FenceDeletions) - before; got != 1 {
		t.Errorf("fence deletions rose by %v, want 1", got)
	}
}

func TestResource(t *testing.T) {
	for path, want := range map[string]string{
		"/apis/trainyard.dev/v1alpha1/namespaces/a/dispatches":                "dispatches",
		"/apis/trainyard.dev/v1alpha1/namespaces/a/dispatches/d":              "dispatches",
		"/apis/trainyard.dev/v1alpha1/namespaces/a/dispatches/d/status":       "dispatches/status",
		"/apis/trainyard.dev/v1alpha1/targets/t/status":                       "targets/status",
		"/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/workloads/w/status":   "workloads/status",
		"/api/v1/namespaces/a/events":                                         "events",
		"/api/v1/namespaces/a":                                                "namespaces",
		"/api/v1/namespaces/a/status":                                         "namespaces/status",
		"/apis/coordination.k8s.io/v1/namespaces/a/leases/trainyard-agent-s1": "leases",
		"/healthz": "other",
	} {
		if got := Resource(path); got != want {
			t.Errorf("Resource(%q) = %q, want %q", path, got, want)
		}
	}
}

// TestCountWriteErrors: failed writes count by resource, verb and code;
// reads and successful writes do not.
func TestCountWriteErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPatch:
			w.WriteHeader(http.StatusConflict)
		case r.Method == http.MethodGet:
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	c := &http.Client{Transport: CountWriteErrors(http.DefaultTransport)}
	do := func(method, path string) {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	const p = "/apis/trainyard.dev/v1alpha1/namespaces/a/dispatches/d/status"
	conflicts := APIWriteErrors.WithLabelValues("dispatches/status", "patch", "409")
	before := testutil.ToFloat64(conflicts)
	do(http.MethodPatch, p)
	do(http.MethodPut, p)
	do(http.MethodGet, p)
	if got := testutil.ToFloat64(conflicts) - before; got != 1 {
		t.Errorf("409 patches rose by %v, want 1", got)
	}
	if got := series(t, APIWriteErrors, "verb", "update") + series(t, APIWriteErrors, "verb", "get"); got != 0 {
		t.Errorf("a successful update or a failed read was counted")
	}

	// No answer at all is code 0.
	dead := &http.Client{Transport: CountWriteErrors(roundTripFunc(func(*http.Request) (*http.Response, error) {
		return nil, errors.New("connection refused")
	}))}
	req, _ := http.NewRequest(http.MethodPost, "http://hub/api/v1/namespaces/a/events", nil)
	if _, err := dead.Do(req); err == nil {
		t.Fatal("want the transport's error")
	}
	if got := testutil.ToFloat64(APIWriteErrors.WithLabelValues("events", "create", "0")); got != 1 {
		t.Errorf("unanswered creates = %v, want 1", got)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func scheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := kueue.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestHubState: the scraped gauges count from the cache: target health,
// heartbeat time and an age that keeps growing with the hub's clock, and
// the waiting Workloads under the targets serving their flavors. The
// Dispatches not yet running, those queued on their target, and the
// waiting line come from the dispatch controller's record: a scrape lists
// no Dispatch and no Workload.
func TestHubState(t *testing.T) {
	now := time.Unix(10_000, 0)
	clk := clocktesting.NewFakeClock(now)
	objs := []client.Object{
		tytesting.MakeKubernetesTarget("a", "gpu").Available().Obj(),
		tytesting.MakeKubernetesTarget("b", "gpu").AvailableCondition(metav1.ConditionFalse, v1alpha1.ReasonBackendError).Obj(),
		tytesting.MakeKubernetesTarget("c", "cpu").FlavorlessJobs(v1alpha1.FlavorlessJobsDeny).
			AvailableCondition(metav1.ConditionFalse, v1alpha1.ReasonAwaitingAgent).Obj(),
		tytesting.MakeDispatch("new", "agents", "a").Obj(),
	}
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			switch list.(type) {
			case *v1alpha1.DispatchList, *kueue.WorkloadList:
				t.Errorf("a scrape listed %T", list)
			}
			return c.List(ctx, list, opts...)
		},
	}).Build()
	flight := &HubFlight{Counts: func() FlightCounts {
		return FlightCounts{InFlight: map[string]int{"a": 2, "b": 1}, Queued: map[string]int{"b": 1}, QueueLimit: map[string]int{"b": 12}, Waiting: []WaitingJob{
			{Since: now.Add(-10 * time.Minute), Flavors: []string{"gpu"}},
			{Since: now.Add(-time.Minute), Flavors: []string{"gpu"}},
			{Since: now.Add(-2 * time.Minute), Flavors: []string{"tpu"}},
		}}
	}}
	beats := &beatSet{m: map[string]beat{}}
	beats.m["a"] = beat{at: now.Add(-5 * time.Second), lostAfter: time.Minute}
	beats.m["b"] = beat{at: now.Add(-90 * time.Second), lostAfter: time.Minute}
	beats.m["deleted"] = beat{at: now, lostAfter: time.Minute}
	col := newStateCollector(&sourceSet{list: []any{&HubState{Reader: c, Clock: clk}, flight}}, beats)
	clk.Step(30 * time.Second) // silent targets age without any reconcile

	want := `
# HELP trainyard_dispatches_in_flight Dispatches to the Target not yet Running (Pending or Submitted).
# TYPE trainyard_dispatches_in_flight gauge
trainyard_dispatches_in_flight{target="a"} 2
trainyard_dispatches_in_flight{target="b"} 1
trainyard_dispatches_in_flight{target="c"} 0
# HELP trainyard_dispatches_queue_limit How many Dispatches the hub keeps in the Target's own queue now: spec.slurm.queueDepth, or deeper while jobs start there faster than the hub refills it.
# TYPE trainyard_dispatches_queue_limit gauge
trainyard_dispatches_queue_limit{target="b"} 12
# HELP trainyard_dispatches_queued Dispatches sent to the Target beyond what it had free, to wait in its own queue (spec.slurm.queueDepth), not yet Running.
# TYPE trainyard_dispatches_queued gauge
trainyard_dispatches_queued{target="a"} 0
trainyard_dispatches_queued{target="b"} 1
trainyard_dispatches_queued{target="c"} 0
# HELP trainyard_queue_depth Workloads waiting for a placement because no target had room, under each Target serving their flavors (target empty: none serves them).
# TYPE trainyard_queue_depth gauge
trainyard_queue_depth{target=""} 1
trainyard_queue_depth{target="a"} 2
trainyard_queue_depth{target="b"} 2
trainyard_queue_depth{target="c"} 0
# HELP trainyard_queue_oldest_wait_seconds Seconds the longest-waiting Workload of queue_depth has waited.
# TYPE trainyard_queue_oldest_wait_seconds gauge
trainyard_queue_oldest_wait_seconds{target=""} 150
trainyard_queue_oldest_wait_seconds{target="a"} 630
trainyard_queue_oldest_wait_seconds{target="b"} 630
# HELP trainyard_target_available 1 when the Target's Available condition is True, else 0.
# TYPE trainyard_target_available gauge
trainyard_target_available{target="a"} 1
trainyard_target_available{target="b"} 0
trainyard_target_available{target="c"} 0
# HELP trainyard_target_awaiting_agent 1 while the Target's lease ran out and, its leaseLoss being Hold, its jobs wait for the agent or an operator's outOfService.
# TYPE trainyard_target_awaiting_agent gauge
trainyard_target_awaiting_agent{target="a"} 0
trainyard_target_awaiting_agent{target="b"} 0
trainyard_target_awaiting_agent{target="c"} 1
# HELP trainyard_target_heartbeat_age_seconds Seconds since the hub last saw the Target's agent renew, by the hub's clock.
# TYPE trainyard_target_heartbeat_age_seconds gauge
trainyard_target_heartbeat_age_seconds{target="a"} 35
trainyard_target_heartbeat_age_seconds{target="b"} 120
# HELP trainyard_target_last_heartbeat_timestamp_seconds Unix time (hub clock) the hub last saw the Target's agent renew; alert on time() minus it.
# TYPE trainyard_target_last_heartbeat_timestamp_seconds gauge
trainyard_target_last_heartbeat_timestamp_seconds{target="a"} 9995
trainyard_target_last_heartbeat_timestamp_seconds{target="b"} 9910
# HELP trainyard_target_lost_after_seconds Seconds of silence after which the hub declares the Target lost and requeues its jobs (lease plus grace).
# TYPE trainyard_target_lost_after_seconds gauge
trainyard_target_lost_after_seconds{target="a"} 60
trainyard_target_lost_after_seconds{target="b"} 60
`
	if err := testutil.CollectAndCompare(col, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// TestAgentState: an agent reports its target's Dispatches by phase,
// zeros included, and one source per target.
func TestAgentState(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(
		tytesting.MakeDispatch("new", "agents", "s1").Obj(),
		tytesting.MakeDispatch("run", "agents", "s1").Phase(v1alpha1.DispatchRunning).Obj(),
		tytesting.MakeDispatch("other-target", "agents", "s2").Phase(v1alpha1.DispatchRunning).Obj(),
		tytesting.MakeDispatch("other-ns", "elsewhere", "s1").Phase(v1alpha1.DispatchRunning).Obj(),
	).Build()
	a := &AgentState{Reader: c, Namespace: "agents", Target: "s1"}
	col := newStateCollector(&sourceSet{list: []any{a, a}}, &beatSet{m: map[string]beat{}})
	got := map[string]float64{}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "phase" {
					got[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	want := map[string]float64{"Pending": 1, "Submitted": 0, "Running": 1, "Succeeded": 0, "Failed": 0, "Cancelled": 0, "Rejected": 0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("agent_dispatches by phase (-want +got):\n%s", diff)
	}
}

// TestRegister: every metric registers on a fresh registry without clashing.
func TestRegister(t *testing.T) {
	Register(prometheus.NewPedanticRegistry())
}

// TestDeclareSyncErrors: a component's failed-sync series exists at 0
// once it is declared, before any failure, and counts from there.
func TestDeclareSyncErrors(t *testing.T) {
	const component = "test-declared"
	series := func() string {
		var b strings.Builder
		ch := make(chan prometheus.Metric, 64)
		SyncErrors.Collect(ch)
		close(ch)
		for m := range ch {
			b.WriteString(m.Desc().String())
			var pb dto.Metric
			if err := m.Write(&pb); err == nil {
				for _, l := range pb.GetLabel() {
					b.WriteString(" " + l.GetName() + "=" + l.GetValue())
				}
			}
			b.WriteString("\n")
		}
		return b.String()
	}
	if strings.Contains(series(), "component="+component) {
		t.Fatalf("series of %s before it was declared", component)
	}
	DeclareSyncErrors(component)
	if !strings.Contains(series(), "component="+component) {
		t.Fatalf("no series of %s once declared", component)
	}
	if got := testutil.ToFloat64(SyncErrors.WithLabelValues(component)); got != 0 {
		t.Errorf("declared series = %v, want 0", got)
	}
	SyncError(component)
	if got := testutil.ToFloat64(SyncErrors.WithLabelValues(component)); got != 1 {
		t.Errorf("after one failure = %v, want 1", got)
	}
	SyncErrors.DeleteLabelValues(component)
}

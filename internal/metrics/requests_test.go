package metrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

func TestSlurmOp(t *testing.T) {
	for path, want := range map[string]string{
		"/slurm/v0.0.42/jobs":       "slurm/jobs",
		"/slurm/v0.0.42/jobs/":      "slurm/jobs",
		"/slurm/v0.0.41/job/1234":   "slurm/job",
		"/slurm/v0.0.42/job/submit": "slurm/job/submit",
		"/slurm/v0.0.42/nodes":      "slurm/nodes",
		"/slurmdb/v0.0.42/job/17":   "slurmdb/job",
		"/slurm/v0.0.42/job/12_3":   "slurm/job",
		"/":                         "other",
	} {
		if got := SlurmOp(path); got != want {
			t.Errorf("SlurmOp(%q) = %q, want %q", path, got, want)
		}
	}
}

// TestCountRequests: every request through the wrapper counts once under
// its system, operation and method, answered or not; ids never become
// labels.
func TestCountRequests(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/jobs") {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	c := &http.Client{Transport: CountRequests(SystemSlurmrestd)(nil)}
	jobs := RemoteRequests.WithLabelValues(SystemSlurmrestd, "slurm/jobs", http.MethodGet)
	job := RemoteRequests.WithLabelValues(SystemSlurmrestd, "slurm/job", http.MethodGet)
	beforeJobs, beforeJob := testutil.ToFloat64(jobs), testutil.ToFloat64(job)
	for _, path := range []string{"/slurm/v0.0.42/jobs", "/slurm/v0.0.42/jobs", "/slurm/v0.0.42/job/7", "/slurm/v0.0.42/job/8"} {
		resp, err := c.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if got := testutil.ToFloat64(jobs) - beforeJobs; got != 2 {
		t.Errorf("job lists counted %v, want 2 (refused ones too)", got)
	}
	if got := testutil.ToFloat64(job) - beforeJob; got != 2 {
		t.Errorf("single-job reads counted %v, want 2", got)
	}

	spoke := &http.Client{Transport: CountRequests(SystemSpoke)(http.DefaultTransport)}
	pods := RemoteRequests.WithLabelValues(SystemSpoke, "pods", http.MethodGet)
	before := testutil.ToFloat64(pods)
	resp, err := spoke.Get(srv.URL + "/api/v1/namespaces/a/pods/p")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := testutil.ToFloat64(pods) - before; got != 1 {
		t.Errorf("spoke pod reads counted %v, want 1", got)
	}
	dead := &http.Client{Transport: CountRequests(SystemSpoke)(roundTripFunc(func(*http.Request) (*http.Response, error) {
		return nil, context.DeadlineExceeded
	}))}
	before = testutil.ToFloat64(pods)
	if _, err := dead.Get(srv.URL + "/api/v1/namespaces/a/pods/p"); err == nil {
		t.Fatal("want the transport's error")
	}
	if got := testutil.ToFloat64(pods) - before; got != 1 {
		t.Errorf("unanswered request counted %v, want 1", got)
	}
}

// TestDecisionDuration: each decision lands in the series of its chosen
// target, in the bucket of its duration; a decision that chose no target
// in the series with an empty target.
func TestDecisionDuration(t *testing.T) {
	count := func(target string) (uint64, []*dto.Bucket) {
		m := &dto.Metric{}
		if err := DecisionDuration.WithLabelValues(target).(prometheus.Metric).Write(m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetBucket()
	}
	before, _ := count("decided")
	beforeNone, _ := count("")
	ObserveDecision("decided", time.Now().Add(-3*time.Millisecond))
	ObserveDecision("", time.Now())
	defer ForgetTarget("decided")
	got, buckets := count("decided")
	if got-before != 1 {
		t.Errorf("decisions on target decided: %d observed, want 1", got-before)
	}
	for _, b := range buckets {
		// 3 ms or more: never in the buckets up to 2 ms.
		if b.GetUpperBound() <= 0.002 && b.GetCumulativeCount() > before {
			t.Errorf("a 3 ms decision counted in the bucket up to %v s", b.GetUpperBound())
		}
	}
	if n, _ := count(""); n-beforeNone != 1 {
		t.Errorf("decisions with no target: %d observed, want 1", n-beforeNone)
	}
}

// TestInFlightOnlyFromTheRecord: a replica without the dispatch
// controller's record (not elected) reports no in-flight gauges rather
// than zeros, and never lists Dispatches for them.
func TestInFlightOnlyFromTheRecord(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(tytesting.MakeKubernetesTarget("a", "gpu").Available().Obj(),
		tytesting.MakeDispatch("new", "agents", "a").Obj()).Build()
	col := newStateCollector(&sourceSet{list: []any{&HubState{Reader: c}}}, &beatSet{m: map[string]beat{}})
	if n := testutil.CollectAndCount(col, "trainyard_dispatches_in_flight", "trainyard_dispatches_queued",
		"trainyard_queue_depth", "trainyard_queue_oldest_wait_seconds"); n != 0 {
		t.Errorf("%d in-flight series without the record, want none", n)
	}
}

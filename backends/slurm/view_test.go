package slurm

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// countingSlurmrestd counts requests by method and path in front of the
// fake, and answers a list with update_time as slurmctld does when no job
// changed, while unchanged is set.
type countingSlurmrestd struct {
	*fakeSlurmrestd
	mu        sync.Mutex
	seen      map[string]int
	since     []string
	unchanged bool
	// beforeSubmit runs once, in the submit's request, before the job is
	// made: to race a list with the submit.
	beforeSubmit func()
}

func (c *countingSlurmrestd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op := r.Method + " " + strings.TrimPrefix(r.URL.Path, "/slurm/v0.0.41/")
	if strings.HasPrefix(op, "GET job/") {
		op = "GET job/<id>"
	}
	c.mu.Lock()
	c.seen[op]++
	since := r.URL.Query().Get("update_time")
	if op == "GET jobs/" {
		c.since = append(c.since, since)
	}
	unchanged := c.unchanged && since != ""
	hook := c.beforeSubmit
	if op == "POST job/submit" {
		c.beforeSubmit = nil
	}
	c.mu.Unlock()
	if op == "POST job/submit" && hook != nil {
		hook()
	}
	if op == "GET jobs/" && unchanged {
		_, _ = w.Write([]byte(`{"jobs":[],"last_update":{"set":true,"number":0},` +
			`"warnings":[{"description":"No job changes since update_time[` + since + `]","source":"op_handler_jobs"}]}`))
		return
	}
	if op == "GET jobs/" {
		// slurmctld's time of the list.
		c.fakeSlurmrestd.mu.Lock()
		jobs := c.fakeSlurmrestd.jobs
		c.fakeSlurmrestd.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"jobs": jobs, "last_update": map[string]any{"set": true, "number": 1700000000}})
		return
	}
	c.fakeSlurmrestd.ServeHTTP(w, r)
}

func (c *countingSlurmrestd) count(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[op]
}

func countingBackend(t *testing.T) (*Backend, *countingSlurmrestd, *clocktesting.FakeClock) {
	t.Helper()
	f := &countingSlurmrestd{fakeSlurmrestd: &fakeSlurmrestd{}, seen: map[string]int{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	c, err := NewClient(srv.URL, "v0.0.41", fixedToken{}, "slurm", &http.Client{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	b := NewBackend(c, func(context.Context) (*v1alpha1.Target, error) { return target().Obj(), nil })
	b.Clock, b.created = clk, clk.Now()
	seeWorkDirs(t, b)
	return b, f, clk
}

// TestObserveReadsTheList: Observe answers from the poller's last list and
// never reads a single job while that list settles it: a job submitted
// after the list is pending, one the list holds is as listed, one a later
// list no longer holds is gone. Lists after the first ask for changes only
// (update_time), and an answer of none keeps the list.
func TestObserveReadsTheList(t *testing.T) {
	b, f, clk := countingBackend(t)
	ctx := context.Background()
	if _, err := b.ListJobs(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Second)
	d := dispatch(caseSpec{})
	ref, err := b.Submit(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	d.Status.Remote = ref
	st, err := b.Observe(ctx, d)
	if err != nil || st.Phase != v1alpha1.DispatchSubmitted {
		t.Fatalf("Observe right after the submit = %+v, %v; want Submitted", st, err)
	}
	if len(b.submitted) != 1 || len(b.submittedAt) != 1 {
		t.Fatal("the submit was forgotten before a list showed its job")
	}

	clk.Step(time.Second)
	if _, err := b.ListJobs(ctx); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.unchanged = true
	f.mu.Unlock()
	for range 3 {
		clk.Step(time.Second)
		jobs, err := b.ListJobs(ctx)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("unchanged list = %d jobs, %v; want the kept 1", len(jobs), err)
		}
		if st, err = b.Observe(ctx, d); err != nil || st.Phase != v1alpha1.DispatchRunning {
			t.Fatalf("Observe from the list = %+v, %v; want Running", st, err)
		}
	}
	if len(b.submitted)+len(b.submittedAt) != 0 {
		t.Error("the submit is still remembered after a list showed its job and the Dispatch recorded it")
	}
	if n := f.count("GET job/<id>"); n != 0 {
		t.Errorf("%d single-job GETs, want none: the list had the job", n)
	}
	f.mu.Lock()
	since := f.since
	f.unchanged = false
	f.fakeSlurmrestd.jobs = nil // slurmctld forgot the job
	f.mu.Unlock()
	// The submit lists once more to prove the job absent.
	if want := []string{"", "1700000000", "1700000000", "1700000000", "1700000000", "1700000000"}; strings.Join(since, ",") != strings.Join(want, ",") {
		t.Errorf("update_time of the lists = %q, want %q", since, want)
	}
	clk.Step(time.Second)
	if _, err := b.ListJobs(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.viewed(d); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("viewed after the job left the list: %v, want ErrJobNotFound", err)
	}
}

// TestListDuringASubmitDoesNotLoseTheJob: the poller's list starts after
// the submit request was sent but reaches slurmctld before the job exists.
// That list does not prove the job gone: Observe must see it as pending,
// never as missing (the agent would fail the TrainJob as RemoteMissing).
func TestListDuringASubmitDoesNotLoseTheJob(t *testing.T) {
	b, f, clk := countingBackend(t)
	ctx := context.Background()
	if _, err := b.ListJobs(ctx); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.beforeSubmit = func() {
		clk.Step(time.Second)
		if _, err := b.ListJobs(ctx); err != nil {
			t.Error(err)
		}
		clk.Step(time.Second)
	}
	f.mu.Unlock()
	clk.Step(time.Second)
	d := dispatch(caseSpec{})
	ref, err := b.Submit(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	d.Status.Remote = ref
	st, err := b.Observe(ctx, d)
	if err != nil || st.Phase != v1alpha1.DispatchSubmitted {
		t.Fatalf("Observe after a list that raced the submit = %+v, %v; want Submitted", st, err)
	}
	clk.Step(time.Second)
	if _, err := b.ListJobs(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err = b.Observe(ctx, d); err != nil || st.Phase != v1alpha1.DispatchRunning {
		t.Fatalf("Observe after the next list = %+v, %v; want Running", st, err)
	}
}

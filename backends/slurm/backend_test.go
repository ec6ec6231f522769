package slurm

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
)

// fakeSlurmrestd serves the few v0.0.41 endpoints the backend calls and
// records every job submitted. Submits it is told to stall are recorded
// (or not) and then held until the client gives up, as a slurmrestd does
// whose slurmctld took the job but answered late.
type fakeSlurmrestd struct {
	mu        sync.Mutex
	jobs      []JobInfo
	descs     []jobDesc // every submit's request, in order
	submits   int
	cancelled []int32
	// stall[n] holds the n-th submit (from 1) until the client hangs up;
	// record says whether slurmctld took it all the same.
	stall  map[int]bool
	status map[int]int // the n-th submit answers this HTTP status
	// forgotten counts the jobs dropped from jobs, as slurmctld forgets
	// ended ones, so job ids are never reused.
	forgotten int
	// refusal[n] is the error the n-th submit's answer names, if set
	// (default: slurmctld unreachable).
	refusal map[int]string
	// killWait: a cancel leaves the job CANCELLED and COMPLETING, as
	// slurmctld does while its processes get KillWait to end, until
	// finish; a cancel of a completing job is refused as slurmctld does.
	killWait bool
}

func (f *fakeSlurmrestd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	const prefix = "/slurm/v0.0.41/"
	path := strings.TrimPrefix(r.URL.Path, prefix)
	switch {
	case r.Method == http.MethodPost && path == "job/submit":
		var body struct {
			Job jobDesc `json:"job"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		f.mu.Lock()
		f.submits++
		f.descs = append(f.descs, body.Job)
		n := f.submits
		record, stalled := f.stall[n]
		if st := f.status[n]; st != 0 {
			msg := cmp.Or(f.refusal[n], "Unable to contact slurm controller (connect failure)")
			f.mu.Unlock()
			w.WriteHeader(st)
			_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"error": msg}}})
			return
		}
		id := int32(100 + f.forgotten + len(f.jobs))
		if !stalled || record {
			f.jobs = append(f.jobs, JobInfo{JobID: id, Name: body.Job.Name, Comment: body.Job.Comment, JobState: []string{"RUNNING"}})
		}
		f.mu.Unlock()
		if stalled {
			<-r.Context().Done()
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"job_id": id})
	case r.Method == http.MethodGet && path == "jobs/":
		f.mu.Lock()
		defer f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"jobs": f.jobs})
	case strings.HasPrefix(path, "job/"):
		id, _ := strconv.Atoi(strings.TrimPrefix(path, "job/"))
		f.mu.Lock()
		defer f.mu.Unlock()
		for i := range f.jobs {
			if f.jobs[i].JobID != int32(id) {
				continue
			}
			if r.Method == http.MethodDelete {
				if f.killWait && slices.Contains(f.jobs[i].JobState, "COMPLETING") {
					w.WriteHeader(http.StatusInternalServerError)
					_, _ = w.Write([]byte(`{"errors":[{"error":"Job/step already completing or completed"}]}`))
					return
				}
				f.cancelled = append(f.cancelled, int32(id))
				f.jobs[i].JobState = []string{"CANCELLED"}
				if f.killWait {
					f.jobs[i].JobState = append(f.jobs[i].JobState, "COMPLETING")
				}
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"jobs": []JobInfo{f.jobs[i]}})
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"errors":[{"error":"Invalid job id specified"}]}`))
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeSlurmrestd) add(id int32, comment string, states ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.jobs = append(f.jobs, JobInfo{JobID: id, Name: "train", Comment: comment, JobState: states})
}

// finish ends job id: its processes are gone, its state is final.
func (f *fakeSlurmrestd) finish(id int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.jobs {
		if f.jobs[i].JobID == id {
			f.jobs[i].JobState = slices.DeleteFunc(f.jobs[i].JobState, func(s string) bool { return s == "COMPLETING" })
		}
	}
}

func (f *fakeSlurmrestd) counts() (submits, jobs int, cancelled []int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.submits, len(f.jobs), slices.Clone(f.cancelled)
}

type fixedToken struct{}

func (fixedToken) Credentials(_ context.Context, user string) (Credentials, error) {
	return Credentials{User: user, Token: "t"}, nil
}

// fakeBackend is a Backend on a fake slurmrestd whose HTTP client gives up
// after 200 ms, on a fake clock started at the backend's creation.
func fakeBackend(t *testing.T, f *fakeSlurmrestd) (*Backend, *clocktesting.FakeClock) {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	c, err := NewClient(srv.URL, "v0.0.41", fixedToken{}, "slurm", &http.Client{Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	b := NewBackend(c, func(context.Context) (*v1alpha1.Target, error) { return target().Obj(), nil })
	b.Clock, b.created = clk, clk.Now()
	seeWorkDirs(t, b)
	return b, clk
}

// seeWorkDirs lets b see the work directories of target()'s users, as an
// agent does below OutputRoot once they exist: no submit needs a job that
// makes one first.
func seeWorkDirs(t *testing.T, b *Backend) {
	t.Helper()
	b.OutputRoot = t.TempDir()
	for _, u := range []string{"svc_a", "svc_b"} {
		dir, err := WorkDir(&v1alpha1.SlurmTarget{}, u)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(b.OutputRoot, dir), 0o700); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSubmitAfterAnUncertainSubmit: a submit that timed out while
// slurmctld took the job is retried only after a list begun SubmitSettle
// after the timeout; the job found is adopted, not made again, even though
// a list taken before the first submit said there was none.
func TestSubmitAfterAnUncertainSubmit(t *testing.T) {
	cases := map[string]struct {
		recorded    bool // slurmctld took the stalled submit
		wantSubmits int
		wantJobs    int
	}{
		"the job was made: adopted":          {recorded: true, wantSubmits: 1, wantJobs: 1},
		"the job was not made: submit again": {recorded: false, wantSubmits: 2, wantJobs: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			f := &fakeSlurmrestd{stall: map[int]bool{1: tc.recorded}}
			b, clk := fakeBackend(t, f)
			d := dispatch(caseSpec{})

			// The poller's list, taken after the start and before any submit.
			clk.Step(time.Second)
			if _, err := b.ListJobs(ctx); err != nil {
				t.Fatal(err)
			}
			clk.Step(time.Second)
			if _, err := b.Submit(ctx, d); !errors.Is(err, ErrSubmitUncertain) {
				t.Fatalf("stalled submit: error = %v, want ErrSubmitUncertain", err)
			}
			// Too soon: neither the kept list nor a new one may say the job is absent.
			clk.Step(b.settle() / 2)
			if _, err := b.ListJobs(ctx); err != nil {
				t.Fatal(err)
			}
			if ref, err := b.Submit(ctx, d); err == nil {
				t.Fatalf("resubmitted before the submit settled: %+v", ref)
			}
			if subs, _, _ := f.counts(); subs != 1 {
				t.Fatalf("%d submits before the first settled, want 1", subs)
			}
			// Settled: a new list decides.
			clk.Step(b.settle())
			ref, err := b.Submit(ctx, d)
			if err != nil {
				t.Fatalf("submit after settling: %v", err)
			}
			subs, jobs, _ := f.counts()
			if subs != tc.wantSubmits || jobs != tc.wantJobs {
				t.Errorf("submits, jobs = %d, %d; want %d, %d", subs, jobs, tc.wantSubmits, tc.wantJobs)
			}
			if ref.ID != "100" {
				t.Errorf("ref = %+v, want job 100", ref)
			}
			// Once known, the job is adopted without asking again.
			if again, err := b.Submit(ctx, d); err != nil || again.ID != ref.ID {
				t.Errorf("submit again: %+v, %v; want %s", again, err, ref.ID)
			}
			if subs2, _, _ := f.counts(); subs2 != subs {
				t.Errorf("a known job was submitted again")
			}
		})
	}
}

// TestSubmitErrorsThatMayHaveMadeAJob: a 5xx or a lost answer may hide an
// accepted job; a 4xx, a job slurmctld refuses for good, or a connection
// that never opened cannot.
func TestSubmitErrorsThatMayHaveMadeAJob(t *testing.T) {
	cases := map[string]struct {
		status    int
		stall     bool
		refused   bool
		uncertain bool
	}{
		"5xx":                       {status: http.StatusInternalServerError, uncertain: true},
		"timeout":                   {stall: true, uncertain: true},
		"4xx":                       {status: http.StatusBadRequest},
		"no connection":             {refused: true},
		"accepted with an answer":   {},
		"bad gateway from a proxy":  {status: http.StatusBadGateway, uncertain: true},
		"unauthorized":              {status: http.StatusUnauthorized},
		"service unavailable (503)": {status: http.StatusServiceUnavailable, uncertain: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := &fakeSlurmrestd{status: map[int]int{}, stall: map[int]bool{}}
			if tc.status != 0 {
				f.status[1] = tc.status
			}
			if tc.stall {
				f.stall[1] = true
			}
			b, _ := fakeBackend(t, f)
			if tc.refused {
				c, err := NewClient("http://127.0.0.1:1", "v0.0.41", fixedToken{}, "slurm", nil)
				if err != nil {
					t.Fatal(err)
				}
				b.Client = c
			}
			job, err := Render(dispatch(caseSpec{}), target().Obj())
			if err != nil {
				t.Fatal(err)
			}
			_, err = b.Client.Submit(context.Background(), job)
			if got := errors.Is(err, ErrSubmitUncertain); got != tc.uncertain {
				t.Errorf("uncertain = %v (error %v), want %v", got, err, tc.uncertain)
			}
		})
	}
}

// TestSubmitRefusalsThatPassWaitAndThoseThatDoNotReject: slurmctld's
// refusals for the state of the cluster now (a partition down or inactive,
// its nodes unavailable now) leave the Dispatch to be submitted again;
// refusals of the job itself reject it.
func TestSubmitRefusalsThatPassWaitAndThoseThatDoNotReject(t *testing.T) {
	cases := map[string]struct {
		refusal  string
		rejected bool
	}{
		"partition configuration not available now": {refusal: "Requested partition configuration not available now"},
		"slurmctld unreachable":                     {refusal: "Unable to contact slurm controller (connect failure)"},
		"no such partition":                         {refusal: "Invalid partition name specified", rejected: true},
		"node configuration never available":        {refusal: "Requested node configuration is not available", rejected: true},
		"bad account":                               {refusal: "Invalid account or account/partition combination specified", rejected: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := &fakeSlurmrestd{status: map[int]int{1: http.StatusBadRequest}, refusal: map[int]string{1: tc.refusal}}
			b, clk := fakeBackend(t, f)
			clk.Step(time.Second) // a list now holds every job of an earlier agent
			_, err := b.Submit(context.Background(), dispatch(caseSpec{}))
			if err == nil {
				t.Fatal("submit succeeded, want the refusal")
			}
			if got := errors.Is(err, backends.ErrRejected); got != tc.rejected {
				t.Errorf("rejected = %v (error %v), want %v", got, err, tc.rejected)
			}
			if !tc.rejected {
				if _, err := b.Submit(context.Background(), dispatch(caseSpec{})); err != nil {
					t.Errorf("submit once the cluster took jobs again: %v", err)
				}
			}
		})
	}
}

// TestCancelEveryJobOfTheDispatch: Cancel stops every job with the
// Dispatch's comment, the one recorded and any other, and reports gone
// only when none is left.
func TestCancelEveryJobOfTheDispatch(t *testing.T) {
	ctx := context.Background()
	f := &fakeSlurmrestd{}
	b, clk := fakeBackend(t, f)
	d := dispatch(caseSpec{})
	other := dispatch(caseSpec{})
	other.Spec.Attempt++
	f.add(7, Comment(d), "RUNNING")
	f.add(8, Comment(d), "PENDING")
	f.add(9, Comment(other), "RUNNING")
	f.add(6, Comment(d), "COMPLETED")
	d.Status.Remote = ref(8, "train")
	clk.Step(time.Second)

	gone, err := b.Cancel(ctx, d)
	if err != nil || gone {
		t.Fatalf("first cancel: gone %v, %v; want false", gone, err)
	}
	_, _, cancelled := f.counts()
	slices.Sort(cancelled)
	if !slices.Equal(cancelled, []int32{7, 8}) {
		t.Errorf("cancelled %v, want [7 8]", cancelled)
	}
	clk.Step(time.Second)
	if gone, err := b.Cancel(ctx, d); err != nil || !gone {
		t.Errorf("second cancel: gone %v, %v; want true", gone, err)
	}
}

// TestCancelWaitsForAnUncertainSubmit: a Dispatch deleted right after a
// submit timed out is not reported gone until a list could show its job.
func TestCancelWaitsForAnUncertainSubmit(t *testing.T) {
	ctx := context.Background()
	f := &fakeSlurmrestd{stall: map[int]bool{1: true}}
	b, clk := fakeBackend(t, f)
	d := dispatch(caseSpec{})
	clk.Step(time.Second)
	if _, err := b.Submit(ctx, d); !errors.Is(err, ErrSubmitUncertain) {
		t.Fatalf("stalled submit: %v", err)
	}
	if gone, err := b.Cancel(ctx, d); err != nil || gone {
		t.Fatalf("cancel before settling: gone %v, %v; want false, nil", gone, err)
	}
	clk.Step(b.settle() + time.Second)
	if gone, err := b.Cancel(ctx, d); err != nil || gone {
		t.Fatalf("cancel after settling: gone %v, %v; want false (job 100 running)", gone, err)
	}
	if _, _, cancelled := f.counts(); !slices.Equal(cancelled, []int32{100}) {
		t.Errorf("cancelled %v, want [100]", cancelled)
	}
}

// TestFenceSeesEveryJobOfAnAttempt: ListRemote names each Dispatch attempt
// once however many live jobs carry its comment, and Delete cancels them all.
func TestFenceSeesEveryJobOfAnAttempt(t *testing.T) {
	ctx := context.Background()
	f := &fakeSlurmrestd{}
	b, _ := fakeBackend(t, f)
	d := dispatch(caseSpec{})
	other := dispatch(caseSpec{})
	other.Name = "d2"
	f.add(7, Comment(d), "RUNNING")
	f.add(8, Comment(d), "RUNNING")
	f.add(9, Comment(other), "RUNNING")
	f.add(10, "someone else's job", "RUNNING")

	works, err := b.ListRemote(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range works {
		got = append(got, w.DispatchName+"="+w.Ref.ID)
	}
	slices.Sort(got)
	if want := []string{"d1=8", "d2=9"}; !slices.Equal(got, want) {
		t.Fatalf("ListRemote = %v, want %v", got, want)
	}
	var w backends.RemoteWork
	for _, x := range works {
		if x.DispatchName == "d1" {
			w = x
		}
	}
	if err := b.Delete(ctx, w); err != nil {
		t.Fatal(err)
	}
	_, _, cancelled := f.counts()
	slices.Sort(cancelled)
	if !slices.Equal(cancelled, []int32{7, 8}) {
		t.Errorf("cancelled %v, want [7 8]", cancelled)
	}
}

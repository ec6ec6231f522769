package slurm

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
)

// accountingBackend is a Backend on slurmrestd f (jobs slurmctld knows)
// that serves db, slurmdbd's answer for every job id, under /slurmdb/;
// db == "" serves no /slurmdb/ at all (slurmrestd without openapi/slurmdbd).
func accountingBackend(t *testing.T, f *fakeSlurmrestd, db string) *Backend {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/slurm/", f)
	if db != "" {
		mux.HandleFunc("/slurmdb/v0.0.41/job/", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(db))
		})
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c, err := NewClient(srv.URL, "v0.0.41", fixedToken{}, "slurm", &http.Client{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return NewBackend(c, func(context.Context) (*v1alpha1.Target, error) { return target().Obj(), nil })
}

// dbAnswer is a slurmdbd job record of job 8 as slurmrestd prints it.
func dbAnswer(comment, state string, rc, submitted int) string {
	return `{"jobs":[{"job_id":8,"name":"train","user":"alice","comment":{"job":"` + comment + `"},
	"nodes":"n[1-2]","allocation_nodes":2,"state":{"current":["` + state + `"],"reason":"None"},
	"time":{"start":1767000000,"end":1767000060,"submission":` + strconv.Itoa(submitted) + `},
	"exit_code":{"status":["` + map[bool]string{true: "SUCCESS", false: "ERROR"}[rc == 0] + `"],
	"return_code":{"set":true,"infinite":false,"number":` + strconv.Itoa(rc) + `}}}]}`
}

// TestObserveAJobSlurmctldForgot: a job that ended while nobody watched
// and left slurmctld's memory is reported from accounting with its real
// outcome; only without a matching, ended record is it missing.
func TestObserveAJobSlurmctldForgot(t *testing.T) {
	d := dispatch(caseSpec{})
	d.Status.Remote = ref(8, "train")
	two := int32(2)
	cases := map[string]struct {
		db       string // "" : slurmrestd without the slurmdbd API
		want     *backends.Status
		notFound bool
	}{
		"completed": {db: dbAnswer(Comment(d), "COMPLETED", 0, 1), want: &backends.Status{
			Phase: v1alpha1.DispatchSucceeded, Message: "Slurm job 8 completed", ExitCode: ptr32(0),
			Replicas: []v1alpha1.ReplicaStatus{{Name: "node", Succeeded: two}},
		}},
		"failed with its exit code": {db: dbAnswer(Comment(d), "FAILED", 3, 1), want: &backends.Status{
			Phase: v1alpha1.DispatchFailed, Reason: v1alpha1.ReasonRemoteFailed, Message: "Slurm job 8 failed, exit code 3",
			ExitCode: ptr32(3), Replicas: []v1alpha1.ReplicaStatus{{Name: "node", Failed: two}},
		}},
		"another job had the id":               {db: dbAnswer("trainyard:someone/else", "COMPLETED", 0, 1), notFound: true},
		"still running in accounting: lost":    {db: dbAnswer(Comment(d), "RUNNING", 0, 1), notFound: true},
		"no record":                            {db: `{"jobs":[]}`, notFound: true},
		"no accounting API: missing as before": {notFound: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b := accountingBackend(t, &fakeSlurmrestd{}, tc.db)
			st, err := b.Observe(context.Background(), d)
			if tc.notFound {
				if !errors.Is(err, backends.ErrNotFound) {
					t.Fatalf("Observe = %+v, %v; want ErrNotFound", st, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			st.StartTime, st.CompletionTime = nil, nil
			if diff := cmp.Diff(tc.want, st); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAccountedJobPicksTheNewestOfTrainyards: slurmdbd keeps every job that
// had an id; the newest one with the Dispatch's comment is the one.
func TestAccountedJobPicksTheNewestOfTrainyards(t *testing.T) {
	d := dispatch(caseSpec{})
	old := strings.TrimSuffix(strings.TrimPrefix(dbAnswer(Comment(d), "FAILED", 1, 5), `{"jobs":[`), `]}`)
	newer := strings.TrimSuffix(strings.TrimPrefix(dbAnswer(Comment(d), "COMPLETED", 0, 9), `{"jobs":[`), `]}`)
	b := accountingBackend(t, &fakeSlurmrestd{}, `{"jobs":[`+newer+`,`+old+`]}`)
	j, err := b.Client.AccountedJob(context.Background(), 8, Comment(d))
	if err != nil {
		t.Fatal(err)
	}
	if got := j.JobState; len(got) != 1 || got[0] != "COMPLETED" {
		t.Errorf("state %v, want the newer record's COMPLETED", got)
	}
}

func ptr32(n int32) *int32 { return &n }

package slurm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
)

// TestExpiry: a job's output is kept for the Target's retention after the
// job ended, for ever with retention 0, and while the end is not known.
func TestExpiry(t *testing.T) {
	now := time.Date(2026, 12, 10, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *metav1.Time { t := metav1.NewTime(now.Add(-d)); return &t }
	day := 24 * time.Hour
	cases := map[string]struct {
		end     *metav1.Time
		days    int32
		wantErr string
	}{
		"end not known":              {days: 7},
		"ended within the days":      {end: ago(7*day - time.Second), days: 7},
		"ended the days ago":         {end: ago(7 * day), days: 7, wantErr: "ended 7d ago (2026-12-03T12:00:00Z), and this target keeps a job's output for 7 days after it ends"},
		"long ago":                   {end: ago(400 * day), days: 7, wantErr: "keeps a job's output for 7 days"},
		"one day":                    {end: ago(2 * day), days: 1, wantErr: "for 1 day after it ends (spec.slurm.outputRetentionDays)"},
		"retention 0 keeps for ever": {end: ago(4000 * day), days: 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := expiry("42", tc.end, tc.days, now)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("expiry = %v, want the output kept", err)
				}
				return
			}
			if !errors.Is(err, ErrOutputExpired) || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "Slurm job 42") {
				t.Fatalf("expiry = %v, want ErrOutputExpired naming job 42 and saying %q", err, tc.wantErr)
			}
		})
	}
}

// TestSameOutput: the paths Slurm reports for a job's streams, as accounting
// keeps them (Render's template) or as slurmctld expands them, must be where
// trainyard told Slurm to write them; outputPath is read either way.
func TestSameOutput(t *testing.T) {
	job := func(out, err string) *JobInfo {
		return &JobInfo{JobID: 8, Name: "train-a3", WorkDir: "/scratch/alice", StandardOutput: out, StandardError: err}
	}
	cases := map[string]struct {
		job     *JobInfo
		wantErr string
	}{
		"the templates (accounting)":  {job: job("%x.%j.out", "%x.%j.err")},
		"both where told (slurmctld)": {job: job("/scratch/alice/train-a3.8.out", "/scratch/alice/train-a3.8.err")},
		"not reported (old slurmdbd)": {job: job("", "")},
		"stdout elsewhere":            {job: job("/home/bob/secret", "/scratch/alice/train-a3.8.err"), wantErr: "wrote its output to /home/bob/secret"},
		"stderr elsewhere":            {job: job("/scratch/alice/train-a3.8.out", "/etc/shadow"), wantErr: "/etc/shadow, not where trainyard told Slurm"},
		"another job's file":          {job: job("/scratch/alice/train-a3.9.out", ""), wantErr: "not where trainyard told Slurm to (/scratch/alice/train-a3.8.out)"},
		"another template":            {job: job("%x.%j.out", "../../bob/%j.err"), wantErr: "wrote its output to ../../bob/%j.err"},
		"relative work directory":     {job: &JobInfo{JobID: 8, Name: "train-a3", WorkDir: "scratch"}, wantErr: "unexpected working directory"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := sameOutput(tc.job)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("sameOutput = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// forgottenRecord is slurmdbd's record of job 8 of d, which ran in
// /scratch/alice and ended at end, as slurmrestd 24.11 prints it (its
// *_expanded paths lack the slash after the working directory).
func forgottenRecord(comment, stdout string, end time.Time) string {
	return fmt.Sprintf(`{"jobs":[{"job_id":8,"name":"train-a3","user":"alice","working_directory":"/scratch/alice",
	"comment":{"job":%q},"state":{"current":["FAILED"],"reason":"NonZeroExitCode"},
	"time":{"start":%d,"end":%d,"submission":1},"stdout":%q,"stderr":"%%x.%%j.err",
	"stdout_expanded":"/scratch/alicetrain-a3.8.out","stderr_expanded":"/scratch/alicetrain-a3.8.err"}]}`,
		comment, end.Add(-time.Minute).Unix(), end.Unix(), stdout)
}

// TestLogsOfAJobSlurmctldForgot: once slurmctld has forgotten a job, Logs
// reads the output accounting says the job of the Dispatch wrote, checked
// against the user id the agent recorded, for the Target's retention.
func TestLogsOfAJobSlurmctldForgot(t *testing.T) {
	now := time.Date(2026, 12, 10, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	me := int64(os.Getuid())
	d := dispatch(caseSpec{})
	const out, tmpl = "/scratch/alice/train-a3.8.out", "%x.%j.out"
	const both = "==> /scratch/alice/train-a3.8.out <==\nstep 1\n==> /scratch/alice/train-a3.8.err <==\nout of memory\n"
	cases := map[string]struct {
		db        string // "": no accounting API
		uid       *int64 // status.remote.userID
		completed *metav1.Time
		retention *int32
		want      string
		wantErr   string
		notFound  bool
	}{
		"read through accounting": {db: forgottenRecord(Comment(d), tmpl, now.Add(-time.Hour)), uid: &me,
			want: both},
		"no user recorded": {db: forgottenRecord(Comment(d), tmpl, now.Add(-time.Hour)),
			wantErr: "before the agent recorded its user"},
		"recorded user owns no such file": {db: forgottenRecord(Comment(d), tmpl, now.Add(-time.Hour)), uid: ptr.To(me + 4242),
			wantErr: "not owned by the job's user"},
		"accounting reports another path": {db: forgottenRecord(Comment(d), "/home/bob/notes", now.Add(-time.Hour)), uid: &me,
			wantErr: "wrote its output to /home/bob/notes"},
		"another job had the id": {db: forgottenRecord("trainyard:someone/else", tmpl, now.Add(-time.Hour)), uid: &me,
			notFound: true, wantErr: "neither slurmctld nor accounting knows slurm job 8"},
		"no accounting API": {uid: &me, notFound: true, wantErr: "serves no accounting"},
		"past the retention by the agent's record": {db: `{"jobs":[]}`, uid: &me, completed: ptr.To(metav1.NewTime(now.Add(-8 * day))),
			wantErr: "the logs are no longer kept: Slurm job 8 ended 8d ago"},
		"past the retention by accounting's end": {db: forgottenRecord(Comment(d), tmpl, now.Add(-8*day)), uid: &me,
			wantErr: "keeps a job's output for 7 days"},
		"within a longer retention": {db: forgottenRecord(Comment(d), tmpl, now.Add(-8*day)), uid: &me, retention: ptr.To[int32](30),
			want: both},
		"retention 0 keeps for ever": {db: forgottenRecord(Comment(d), tmpl, now.Add(-800*day)), uid: &me, retention: ptr.To[int32](0),
			completed: ptr.To(metav1.NewTime(now.Add(-800 * day))), want: both},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "scratch", "alice")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			for file, body := range map[string]string{"train-a3.8.out": "step 1\n", "train-a3.8.err": "out of memory\n"} {
				if err := os.WriteFile(filepath.Join(dir, file), []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			b := accountingBackend(t, &fakeSlurmrestd{}, tc.db)
			b.OutputRoot, b.Clock = root, clocktesting.NewFakePassiveClock(now)
			tg := target().Obj()
			tg.Spec.Slurm.OutputRetentionDays = tc.retention
			b.Target = func(context.Context) (*v1alpha1.Target, error) { return tg, nil }
			d := d.DeepCopy()
			d.Status.Remote = ref(8, "train-a3")
			d.Status.Remote.UserID, d.Status.CompletionTime = tc.uid, tc.completed

			logs, err := b.Logs(context.Background(), d, backends.LogOptions{LimitBytes: 1 << 20})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || errors.Is(err, backends.ErrNotFound) != tc.notFound {
					t.Fatalf("Logs = %+v, %v; want an error saying %q (not found: %v)", logs, err, tc.wantErr, tc.notFound)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(logs.Data) != tc.want {
				t.Errorf("output %q, want %q", logs.Data, tc.want)
			}
			if want := "slurm job 8: " + out; !strings.HasPrefix(logs.Source, want) {
				t.Errorf("source %q, want it to start %q", logs.Source, want)
			}
		})
	}
}

// TestLogsWhileSlurmctldKnowsTheJob: slurmctld's record, and the user id it
// reports, decide while it has one; no accounting is asked.
func TestLogsWhileSlurmctldKnowsTheJob(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "scratch", "alice"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "scratch", "alice", "train-a3.8.out"), []byte("running\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := dispatch(caseSpec{})
	d.Status.Remote = ref(8, "train-a3")
	f := &fakeSlurmrestd{jobs: []JobInfo{{JobID: 8, Name: "train-a3", Comment: Comment(d), WorkDir: "/scratch/alice",
		UserID: ptr.To(int32(os.Getuid())), JobState: []string{"RUNNING"}}}}
	b := accountingBackend(t, f, "") // no accounting API at all
	b.OutputRoot = root
	logs, err := b.Logs(context.Background(), d, backends.LogOptions{LimitBytes: 1 << 20})
	if err != nil || string(logs.Data) != "running\n" {
		t.Fatalf("Logs = %+v, %v; want the running job's output", logs, err)
	}
}

package main

import (
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

func dispatch(name, target string, phase v1alpha1.DispatchPhase) v1alpha1.Dispatch {
	d := v1alpha1.Dispatch{ObjectMeta: metav1.ObjectMeta{Name: name + "-a1", Namespace: "team-a"}}
	d.Spec.Workload.Namespace = "team-a"
	d.Spec.TrainJob.Name = name
	d.Spec.TargetName = target
	d.Spec.Attempt = 1
	d.Status.Phase = phase
	return d
}

func TestDispatchChangesPrintsOneLinePerChange(t *testing.T) {
	seen := map[string]string{}
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	a, b := dispatch("a", "spoke1", "Submitted"), dispatch("b", "hpc", "Running")
	if got := dispatchChanges(seen, []v1alpha1.Dispatch{b, a}, now); len(got) != 2 ||
		got[0] != "10:00:00  team-a/a  target spoke1  attempt 1  Submitted" ||
		got[1] != "10:00:00  team-a/b  target hpc  attempt 1  Running" {
		t.Fatalf("first listing: %q", got)
	}
	if got := dispatchChanges(seen, []v1alpha1.Dispatch{a, b}, now); len(got) != 0 {
		t.Fatalf("nothing changed, yet: %q", got)
	}
	a.Status.Phase = "Running"
	a.Status.Remote = &v1alpha1.RemoteRef{Kind: "JobSet", Namespace: "jobs-team-a", Name: "a-1"}
	if got := dispatchChanges(seen, []v1alpha1.Dispatch{a, b}, now); len(got) != 1 ||
		got[0] != "10:00:00  team-a/a  target spoke1  attempt 1  Running  JobSet jobs-team-a/a-1" {
		t.Fatalf("a started: %q", got)
	}
	if got := dispatchChanges(seen, []v1alpha1.Dispatch{a}, now); len(got) != 1 || !strings.HasSuffix(got[0], "team-a/b  target hpc  attempt 1  Running  (deleted)") {
		t.Fatalf("b deleted: %q", got)
	}
}

func TestLiveTableRedrawsInPlace(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	live := &liveTable{out: newDevOutput(f, func() {})}
	read := func() string {
		b, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		_ = f.Truncate(0)
		_, _ = f.Seek(0, 0)
		return string(b)
	}
	live.draw([]string{"header", "row one", "row two"}, 80)
	if got := read(); got != "header\nrow one\nrow two\n" {
		t.Fatalf("first drawing: %q", got)
	}
	live.draw([]string{"header", "row one", "row two"}, 80)
	if got := read(); got != "" {
		t.Fatalf("an unchanged table is not drawn again, got %q", got)
	}
	live.draw([]string{"header", "a row far wider than the terminal"}, 10)
	if got := read(); got != "\x1b[3A\r\x1b[Jheader\na row far\n" {
		t.Fatalf("redraw: %q", got)
	}
}

func TestDevOutputStopsOnClosedPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if readerGone(w) {
		t.Fatal("the reader is still there")
	}
	r.Close()
	if !readerGone(w) {
		t.Fatal("the closed reader was not noticed")
	}
	gone := make(chan struct{})
	out := newDevOutput(w, func() { close(gone) })
	out.line("nobody reads this")
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("a write to a closed pipe did not stop the sandbox")
	}
	out.line("nor this") // dropped, and no second call of onGone
}

package hubview

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"
)

func TestProgressCells(t *testing.T) {
	report := func(pct, left int32, old time.Duration) *ProgressSummary {
		return &ProgressSummary{Percent: ptr.To(pct), RemainingSeconds: ptr.To(left), Reported: ago(old)}
	}
	cases := map[string]struct {
		p             *ProgressSummary
		phase         string
		progress, eta string
	}{
		"no report":                  {phase: "Running", progress: "-", eta: "-"},
		"a fresh report":             {p: report(42, 3600, 30*time.Second), phase: "Running", progress: "42%", eta: "59m"},
		"the estimate counts down":   {p: report(42, 3600, 9*time.Minute), phase: "Running", progress: "42%", eta: "51m"},
		"an estimate that ran out":   {p: report(99, 60, 5*time.Minute), phase: "Running", progress: "99%", eta: "any moment"},
		"no percentage, an estimate": {p: &ProgressSummary{RemainingSeconds: ptr.To[int32](7200), Reported: ago(0)}, phase: "Running", progress: "-", eta: "120m"},
		"a stale report":             {p: report(42, 3600, 12*time.Minute), phase: "Running", progress: "42% (stale 12m)", eta: "-"},
		"stale while admitted (a tenant sees no Dispatch)": {p: report(42, 3600, 3*time.Hour), phase: StateAdmitted, progress: "42% (stale 3h)", eta: "-"},
		"finished: old is not stale, no ETA":               {p: report(100, 0, 3*time.Hour), phase: "Succeeded", progress: "100%", eta: "-"},
		"finished per Kueue":                               {p: report(70, 900, 3*time.Hour), phase: StateFinished, progress: "70%", eta: "-"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := []string{ProgressCell(tc.p, tc.phase, now), ETACell(tc.p, tc.phase, now)}
			if diff := cmp.Diff([]string{tc.progress, tc.eta}, got); diff != "" {
				t.Errorf("PROGRESS, ETA (-want +got):\n%s", diff)
			}
		})
	}
}

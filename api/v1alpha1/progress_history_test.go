package v1alpha1

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

var t0 = time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)

func report(at time.Duration, pct int32, metrics ...string) *trainer.TrainerStatus {
	ts := &trainer.TrainerStatus{ProgressPercentage: ptr.To(pct), LastUpdatedTime: metav1.NewTime(t0.Add(at))}
	for i := 0; i+1 < len(metrics); i += 2 {
		ts.Metrics = append(ts.Metrics, trainer.Metric{Name: metrics[i], Value: metrics[i+1]})
	}
	return ts
}

func at(d time.Duration, pct int32, values ...string) ProgressPoint {
	return ProgressPoint{Time: metav1.NewTime(t0.Add(d)), ProgressPercentage: ptr.To(pct), Values: values}
}

func TestRecordProgress(t *testing.T) {
	start := &ProgressHistory{StepSeconds: 30, Metrics: []string{"loss"}, Points: []ProgressPoint{at(0, 1, "2.5")}}
	cases := map[string]struct {
		h       *ProgressHistory
		report  *trainer.TrainerStatus
		final   bool
		want    *ProgressHistory
		changed bool
	}{
		"the first report starts a history": {
			report:  report(0, 1, "loss", "2.5", "epoch", "1"),
			want:    &ProgressHistory{StepSeconds: 30, Metrics: []string{"loss", "epoch"}, Points: []ProgressPoint{at(0, 1, "2.5", "1")}},
			changed: true,
		},
		"a report a step later is added": {
			h:       start,
			report:  report(30*time.Second, 2, "loss", "2.25"),
			want:    &ProgressHistory{StepSeconds: 30, Metrics: []string{"loss"}, Points: []ProgressPoint{at(0, 1, "2.5"), at(30*time.Second, 2, "2.25")}},
			changed: true,
		},
		"a report within a step is not": {
			h: start, report: report(29*time.Second, 2, "loss", "2.25"), want: start,
		},
		"unless it is the last of finished work": {
			h:       start,
			report:  report(5*time.Second, 100, "loss", "2.25"),
			final:   true,
			want:    &ProgressHistory{StepSeconds: 30, Metrics: []string{"loss"}, Points: []ProgressPoint{at(0, 1, "2.5"), at(5*time.Second, 100, "2.25")}},
			changed: true,
		},
		"a report older than the last point is dropped": {
			h: start, report: report(-time.Minute, 0), final: true, want: start,
		},
		"values that are not numbers are left out, numbers rounded": {
			report: report(0, 1, "loss", "0.1234567891", "stage", "warmup", "acc", "NaN", "lr", "3e-4"),
			want: &ProgressHistory{StepSeconds: 30, Metrics: []string{"loss", "lr"},
				Points: []ProgressPoint{at(0, 1, "0.123457", "0.0003")}},
			changed: true,
		},
		"a metric missing from a report is empty, trailing ones dropped": {
			h:      &ProgressHistory{StepSeconds: 30, Metrics: []string{"loss", "acc", "lr"}, Points: []ProgressPoint{at(0, 1, "2", "0.1", "1")}},
			report: report(time.Minute, 2, "acc", "0.2"),
			want: &ProgressHistory{StepSeconds: 30, Metrics: []string{"loss", "acc", "lr"},
				Points: []ProgressPoint{at(0, 1, "2", "0.1", "1"), at(time.Minute, 2, "", "0.2")}},
			changed: true,
		},
		"no report": {h: start, want: start},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			before := tc.h.DeepCopy()
			got, changed := RecordProgress(tc.h, tc.report, tc.final)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("history (-want +got):\n%s", diff)
			}
			if changed != tc.changed {
				t.Errorf("changed = %v, want %v", changed, tc.changed)
			}
			if diff := cmp.Diff(before, tc.h); diff != "" {
				t.Errorf("the history given was modified (-before +after):\n%s", diff)
			}
		})
	}
}

func TestRecordProgressMetricsBound(t *testing.T) {
	ts := report(0, 1)
	for i := range 12 {
		ts.Metrics = append(ts.Metrics, trainer.Metric{Name: fmt.Sprintf("m%d", i), Value: "1"})
	}
	h, _ := RecordProgress(nil, ts, false)
	if len(h.Metrics) != MaxProgressMetrics || h.Metrics[0] != "m0" || h.Metrics[7] != "m7" {
		t.Errorf("metrics = %v, want m0..m7", h.Metrics)
	}
	if n := len(h.Points[0].Values); n != MaxProgressMetrics {
		t.Errorf("values of a point: %d, want %d", n, MaxProgressMetrics)
	}
}

// TestRecordProgressLongRuns feeds runs of various lengths and report
// intervals and checks the bound, the ends and the order of what is kept.
func TestRecordProgressLongRuns(t *testing.T) {
	for _, run := range []struct {
		length, every time.Duration
	}{
		{time.Hour, 30 * time.Second},
		{time.Hour + 30*time.Second, 30 * time.Second},
		{48 * time.Hour, 30 * time.Second},
		{30 * 24 * time.Hour, 37 * time.Second},
		{10 * time.Minute, time.Second},
	} {
		t.Run(fmt.Sprintf("%s every %s", run.length, run.every), func(t *testing.T) {
			var h *ProgressHistory
			var last time.Duration
			for d := time.Duration(0); d <= run.length; d += run.every {
				final := d+run.every > run.length
				h, _ = RecordProgress(h, report(d, int32(100*d/run.length), "loss", fmt.Sprint(float64(d))), final)
				last = d
				if n := len(h.Points); n > MaxProgressPoints {
					t.Fatalf("at %s: %d points, at most %d", d, n, MaxProgressPoints)
				}
			}
			first, end := h.Points[0], h.Points[len(h.Points)-1]
			if !first.Time.Equal(&metav1.Time{Time: t0}) || !end.Time.Equal(&metav1.Time{Time: t0.Add(last)}) {
				t.Errorf("spans %s..%s, want the run's first and last report", first.Time, end.Time)
			}
			step := h.step()
			for i := 1; i < len(h.Points); i++ {
				gap := h.Points[i].Time.Sub(h.Points[i-1].Time.Time)
				if gap <= 0 {
					t.Fatalf("points %d and %d out of order", i-1, i)
				}
				if gap < step && i < len(h.Points)-1 {
					t.Errorf("points %d and %d %s apart, less than the step %s", i-1, i, gap, step)
				}
			}
			// Points still cover the run: one a step (30 s) or a report,
			// and at least half the bound once it filled (each thinning
			// halves at most).
			if want := min(int(run.length/max(run.every, DefaultProgressStepSeconds*time.Second))+1, MaxProgressPoints/2); len(h.Points) < want {
				t.Errorf("%d points, want at least %d", len(h.Points), want)
			}
		})
	}
}

func TestBoundThinsAnOversizedHistory(t *testing.T) {
	h := &ProgressHistory{StepSeconds: 1, Metrics: strings.Split("a b c d e f g h i j", " ")}
	for i := range 500 {
		h.Points = append(h.Points, at(time.Duration(i)*time.Second, 0, strings.Split("1 2 3 4 5 6 7 8 9 10", " ")...))
	}
	h.Bound()
	if len(h.Points) > MaxProgressPoints || len(h.Metrics) != MaxProgressMetrics || len(h.Points[0].Values) != MaxProgressMetrics {
		t.Fatalf("bound: %d points, %d metrics, %d values", len(h.Points), len(h.Metrics), len(h.Points[0].Values))
	}
	if !h.Points[0].Time.Time.Equal(t0) || !h.Points[len(h.Points)-1].Time.Time.Equal(t0.Add(499*time.Second)) {
		t.Errorf("ends %s..%s", h.Points[0].Time, h.Points[len(h.Points)-1].Time)
	}
}

// TestProgressHistoryWorstSize is the figure the docs give: a full history
// with every metric at the longest names and values.
func TestProgressHistoryWorstSize(t *testing.T) {
	h := &ProgressHistory{StepSeconds: 1 << 20}
	for i := range MaxProgressMetrics {
		h.Metrics = append(h.Metrics, fmt.Sprintf("%064d", i))
	}
	for i := range MaxProgressPoints {
		p := at(time.Duration(i)*time.Hour, 100)
		for range MaxProgressMetrics {
			p.Values = append(p.Values, "-1.23457e-100")
		}
		h.Points = append(h.Points, p)
	}
	raw, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) > 25<<10 {
		t.Errorf("a full history is %d bytes of JSON, the docs say at most 25 KiB", len(raw))
	}
	t.Logf("a full history: %d bytes", len(raw))
}

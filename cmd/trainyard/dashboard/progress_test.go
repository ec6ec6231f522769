package dashboard

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/hubview"
)

func point(minutes int, pct int32, values ...string) v1alpha1.ProgressPoint {
	return v1alpha1.ProgressPoint{Time: metav1.Time{Time: now.Add(time.Duration(minutes) * time.Minute)}, ProgressPercentage: ptr.To(pct), Values: values}
}

func TestCurves(t *testing.T) {
	history := &v1alpha1.ProgressHistory{StepSeconds: 60, Metrics: []string{"loss", "acc"}, Points: []v1alpha1.ProgressPoint{
		point(-30, 0, "4", ""), point(-20, 50, "2", "0.5"), point(-10, 100, "0", "0.5"),
	}}
	report := func(minutes int, metrics ...trainer.Metric) *trainer.TrainerStatus {
		return &trainer.TrainerStatus{LastUpdatedTime: metav1.Time{Time: now.Add(time.Duration(minutes) * time.Minute)}, Metrics: metrics}
	}
	cases := map[string]struct {
		history *v1alpha1.ProgressHistory
		latest  *trainer.TrainerStatus
		want    []Curve
	}{
		"nothing": {want: []Curve{}},
		"history: across the box in time, values from the top": {
			history: history,
			want: []Curve{
				{Name: "progress %", Points: "6.0,114.0 180.0,60.0 354.0,6.0", N: 3, Min: "0", Max: "100", Last: "100", Span: "20m"},
				{Name: "loss", Points: "6.0,6.0 180.0,60.0 354.0,114.0", N: 3, Min: "0", Max: "4", Last: "0", Span: "20m"},
				// A flat curve runs through the middle; a missing value is no point.
				{Name: "acc", Points: "6.0,60.0 354.0,60.0", N: 2, Min: "0.5", Max: "0.5", Last: "0.5", Span: "10m"},
			},
		},
		"a newer report extends the kept metrics only": {
			history: &v1alpha1.ProgressHistory{StepSeconds: 60, Metrics: []string{"loss"}, Points: history.Points[:1]},
			latest:  report(-20, trainer.Metric{Name: "loss", Value: "2"}, trainer.Metric{Name: "lr", Value: "0.1"}),
			want: []Curve{
				{Name: "progress %", Points: "354.0,60.0", N: 1, Min: "0", Max: "0", Last: "0", Span: "0s"},
				{Name: "loss", Points: "6.0,6.0 354.0,114.0", N: 2, Min: "2", Max: "4", Last: "2", Span: "10m"},
			},
		},
		"a report no newer than the history adds nothing": {
			history: &v1alpha1.ProgressHistory{StepSeconds: 60, Metrics: []string{"loss"}, Points: history.Points[:1]},
			latest:  report(-30, trainer.Metric{Name: "loss", Value: "2"}),
			want: []Curve{
				{Name: "progress %", Points: "354.0,60.0", N: 1, Min: "0", Max: "0", Last: "0", Span: "0s"},
				{Name: "loss", Points: "354.0,60.0", N: 1, Min: "4", Max: "4", Last: "4", Span: "0s"},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := curves(tc.history, tc.latest)
			for i := range tc.want {
				tc.want[i].Width, tc.want[i].Height = curveWidth, curveHeight
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("curves (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuildProgress(t *testing.T) {
	ts := &trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](42), EstimatedRemainingSeconds: ptr.To[int32](3600),
		LastUpdatedTime: metav1.Time{Time: now.Add(-20 * time.Minute)}}
	cases := map[string]struct {
		d    *hubview.Description
		want *ProgressView
	}{
		"no page":   {},
		"no report": {d: &hubview.Description{Phase: "Running"}},
		"stale": {d: &hubview.Description{Phase: "Running", Progress: ts},
			want: &ProgressView{Percent: ptr.To[int32](42), Text: "42%", Reported: "20m", Stale: true,
				Curves: []Curve{{Name: "progress %", Points: "354.0,60.0", N: 1, Min: "42", Max: "42", Last: "42", Span: "0s", Width: curveWidth, Height: curveHeight}}}},
		"finished": {d: &hubview.Description{Phase: "Succeeded", Progress: ts},
			want: &ProgressView{Percent: ptr.To[int32](42), Text: "42%", Reported: "20m",
				Curves: []Curve{{Name: "progress %", Points: "354.0,60.0", N: 1, Min: "42", Max: "42", Last: "42", Span: "0s", Width: curveWidth, Height: curveHeight}}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, buildProgress(tc.d, now)); diff != "" {
				t.Errorf("progress (-want +got):\n%s", diff)
			}
		})
	}
}

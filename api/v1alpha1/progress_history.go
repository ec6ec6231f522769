package v1alpha1

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Bounds of a ProgressHistory. With MaxProgressValueLen characters a
// value, a full history is at most about 25 KiB of JSON (a test checks):
// small beside the Dispatch it rides on, and well inside the 256 KiB the
// API server allows all of a TrainJob's annotations together.
const (
	MaxProgressPoints  = 120
	MaxProgressMetrics = 8
	// MaxProgressValueLen fits a number printed with progressDigits
	// significant digits: "-1.23457e-100".
	MaxProgressValueLen = 16
	// DefaultProgressStepSeconds is a new history's least spacing of
	// points: the agent's pacing of progress writes. 120 points at 30 s
	// cover the first hour; each time the history fills, the step doubles.
	DefaultProgressStepSeconds = 30
	// progressDigits are the significant digits a value is kept with.
	progressDigits = 6
)

// AnnotationProgressHistory on a hub TrainJob is its live Dispatch's
// ProgressHistory as JSON, copied there by the hub with the placement
// summary, so the job's owner can draw its curves without reading
// Dispatches (which only administrators may).
const AnnotationProgressHistory = "trainyard.dev/progress-history"

// ProgressHistory is a bounded record of one attempt's progress reports,
// for curves over the attempt's whole life. The agent adds the reports it
// writes to the hub. Points are at least stepSeconds apart (the report of
// finished work is always added); when a point is due and the history
// holds MaxProgressPoints, stepSeconds doubles and the points closer than
// that are dropped, keeping the first and the latest. So it always spans
// the run from its first report, at a resolution that halves each time it
// fills, and it changes less often the longer the job runs.
type ProgressHistory struct {
	// stepSeconds is the least time between two points.
	// +required
	// +kubebuilder:validation:Minimum=1
	StepSeconds int32 `json:"stepSeconds"`

	// metrics names the metrics the history keeps, in the order of each
	// point's values: the first MaxProgressMetrics names, in the order
	// the reports first gave them, whose values were numbers.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=64
	Metrics []string `json:"metrics,omitempty"`

	// points, oldest first.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=120
	Points []ProgressPoint `json:"points,omitempty"`
}

// ProgressPoint is one report in a ProgressHistory.
type ProgressPoint struct {
	// time of the report (its lastUpdatedTime).
	// +required
	Time metav1.Time `json:"time"`

	// progressPercentage of the report.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	ProgressPercentage *int32 `json:"progressPercentage,omitempty"`

	// values of the history's metrics in its order, as numbers with 6
	// significant digits; "" where the report had no number for one.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=16
	Values []string `json:"values,omitempty"`
}

// RecordProgress returns h with the report ts added when it is due (see
// ProgressHistory), and whether it changed. h is not modified; nil h
// starts a history. final adds the report whatever its spacing: the
// report of finished work is the last.
func RecordProgress(h *ProgressHistory, ts *trainer.TrainerStatus, final bool) (*ProgressHistory, bool) {
	if ts == nil || ts.LastUpdatedTime.IsZero() {
		return h, false
	}
	out := h.DeepCopy()
	if out == nil {
		out = &ProgressHistory{StepSeconds: DefaultProgressStepSeconds}
	}
	out.StepSeconds = max(out.StepSeconds, 1)
	if n := len(out.Points); n > 0 {
		gap := ts.LastUpdatedTime.Sub(out.Points[n-1].Time.Time)
		if gap <= 0 || (!final && gap < out.step()) {
			return h, false // older than the last point, or not yet due
		}
	}
	out.Points = append(out.Points, out.point(ts))
	out.Bound()
	return out, true
}

// Bound thins h to at most MaxProgressPoints points and MaxProgressMetrics
// metrics: while it holds too many points the step doubles and each point
// closer than a step to the one kept before it goes, except the last.
// Points keep their order; the first and the last are always kept.
func (h *ProgressHistory) Bound() {
	if h == nil {
		return
	}
	if len(h.Metrics) > MaxProgressMetrics {
		h.Metrics = h.Metrics[:MaxProgressMetrics]
	}
	for i := range h.Points {
		if len(h.Points[i].Values) > len(h.Metrics) {
			h.Points[i].Values = h.Points[i].Values[:len(h.Metrics)]
		}
	}
	h.StepSeconds = max(h.StepSeconds, 1)
	for len(h.Points) > MaxProgressPoints {
		if h.StepSeconds > math.MaxInt32/2 {
			// Only reachable by points years apart: keep the ends.
			h.Points = append(h.Points[:MaxProgressPoints-1], h.Points[len(h.Points)-1])
			break
		}
		h.StepSeconds *= 2
		h.Points = thin(h.Points, h.step())
	}
}

// thin keeps the first point, each point at least step after the last one
// kept, and the last point (which replaces a kept one closer than step).
func thin(points []ProgressPoint, step time.Duration) []ProgressPoint {
	out := points[:1]
	last := len(points) - 1
	for i, p := range points[1:] {
		if i+1 == last {
			if len(out) > 1 && p.Time.Sub(out[len(out)-1].Time.Time) < step {
				out = out[:len(out)-1]
			}
			out = append(out, p)
			break
		}
		if p.Time.Sub(out[len(out)-1].Time.Time) >= step {
			out = append(out, p)
		}
	}
	return slices.Clip(out)
}

func (h *ProgressHistory) step() time.Duration {
	return time.Duration(h.StepSeconds) * time.Second
}

// point turns a report into a point, taking its new numeric metrics into
// h.Metrics while there is room.
func (h *ProgressHistory) point(ts *trainer.TrainerStatus) ProgressPoint {
	p := ProgressPoint{Time: ts.LastUpdatedTime}
	if ts.ProgressPercentage != nil {
		pct := *ts.ProgressPercentage
		p.ProgressPercentage = &pct
	}
	values := map[string]string{}
	for _, m := range ts.Metrics {
		v, ok := ProgressValue(m.Value)
		if !ok {
			continue
		}
		values[m.Name] = v
		if !slices.Contains(h.Metrics, m.Name) && len(h.Metrics) < MaxProgressMetrics {
			h.Metrics = append(h.Metrics, m.Name)
		}
	}
	if len(h.Metrics) > 0 {
		p.Values = make([]string, len(h.Metrics))
		for i, name := range h.Metrics {
			p.Values[i] = values[name]
		}
		for len(p.Values) > 0 && p.Values[len(p.Values)-1] == "" {
			p.Values = p.Values[:len(p.Values)-1]
		}
	}
	return p
}

// ProgressValue is a metric's value as a history keeps it: a finite number
// with 6 significant digits. ok is false for anything else ("nan", "12
// steps").
func ProgressValue(s string) (v string, ok bool) {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return "", false
	}
	return strconv.FormatFloat(f, 'g', progressDigits, 64), true
}

package dashboard

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/hubview"
)

// Size of a curve's drawing, in SVG units.
const (
	curveWidth, curveHeight = 360, 120
	curvePad                = 6
)

// ProgressView is the job page's progress: the latest report as a bar,
// its ETA and metrics, and a curve per metric over the attempt's life.
type ProgressView struct {
	// Percent is the bar's fill; nil when the job reported no percentage.
	Percent *int32
	// Text is "42%, ETA 59m" (as `trainyard describe`).
	Text string
	// Reported is the report's age; Stale marks a job that has not
	// finished and has not reported for hubview.StaleReportAfter.
	Reported string
	Stale    bool
	Metrics  []trainer.Metric
	Curves   []Curve
	// StepSeconds is the history's least spacing of points.
	StepSeconds int32
}

// Curve is one metric over time, drawn as an SVG polyline.
type Curve struct {
	Name string
	// Points is the polyline's points attribute; N counts them.
	Points string
	N      int
	// Min, Max and Last label the curve; Span is the time it covers.
	Min, Max, Last, Span string
	// Width and Height are the drawing's size.
	Width, Height int
}

// buildProgress is the progress of job d at now, or nil when the job has
// neither a report nor history.
func buildProgress(d *hubview.Description, now time.Time) *ProgressView {
	if d == nil || (d.Progress == nil && d.ProgressHistory == nil) {
		return nil
	}
	v := &ProgressView{Text: hubview.ProgressText(d.Progress, d.Phase, now)}
	if ts := d.Progress; ts != nil {
		v.Percent, v.Metrics = ts.ProgressPercentage, ts.Metrics
		v.Reported = age(now, ts.LastUpdatedTime)
		v.Stale = hubview.StaleReport(d.Phase, ts.LastUpdatedTime, now)
	}
	if h := d.ProgressHistory; h != nil {
		v.StepSeconds = h.StepSeconds
	}
	v.Curves = curves(d.ProgressHistory, d.Progress)
	return v
}

// sample is one value of one metric at a time.
type sample struct {
	at time.Time
	v  float64
}

// curves draws the history's progress and each of its metrics, with the
// latest report added when it is newer than the history's last point.
func curves(h *v1alpha1.ProgressHistory, latest *trainer.TrainerStatus) []Curve {
	series := map[string][]sample{}
	var names []string
	add := func(name string, at time.Time, value string) {
		f, err := strconv.ParseFloat(value, 64)
		if value == "" || err != nil {
			return
		}
		if _, ok := series[name]; !ok {
			names = append(names, name)
		}
		series[name] = append(series[name], sample{at, f})
	}
	var last time.Time
	if h != nil {
		for _, p := range h.Points {
			if p.ProgressPercentage != nil {
				add("progress %", p.Time.Time, strconv.Itoa(int(*p.ProgressPercentage)))
			}
			for i, value := range p.Values {
				if i < len(h.Metrics) {
					add(h.Metrics[i], p.Time.Time, value)
				}
			}
			last = p.Time.Time
		}
	}
	if latest != nil && latest.LastUpdatedTime.After(last) {
		if latest.ProgressPercentage != nil {
			add("progress %", latest.LastUpdatedTime.Time, strconv.Itoa(int(*latest.ProgressPercentage)))
		}
		for _, m := range latest.Metrics {
			// Only the metrics the history keeps: a curve per report
			// metric could be 256.
			if _, kept := series[m.Name]; kept {
				if v, ok := v1alpha1.ProgressValue(m.Value); ok {
					add(m.Name, latest.LastUpdatedTime.Time, v)
				}
			}
		}
	}
	out := make([]Curve, 0, len(names))
	for _, name := range names {
		out = append(out, draw(name, series[name]))
	}
	return out
}

// draw scales samples (in time order) into the curve's box: time from
// the first to the last sample across, values from the least to the
// greatest up.
func draw(name string, s []sample) Curve {
	lo, hi := s[0].v, s[0].v
	for _, p := range s {
		lo, hi = min(lo, p.v), max(hi, p.v)
	}
	span := s[len(s)-1].at.Sub(s[0].at)
	w, h := float64(curveWidth-2*curvePad), float64(curveHeight-2*curvePad)
	pts := make([]string, len(s))
	for i, p := range s {
		x, y := float64(curvePad)+w, float64(curvePad)+h/2
		if span > 0 {
			x = float64(curvePad) + w*float64(p.at.Sub(s[0].at))/float64(span)
		}
		if hi > lo {
			y = float64(curvePad) + h*(hi-p.v)/(hi-lo)
		}
		pts[i] = fmt.Sprintf("%.1f,%.1f", x, y)
	}
	return Curve{
		Name: name, Points: strings.Join(pts, " "), N: len(s),
		Min: number(lo), Max: number(hi), Last: number(s[len(s)-1].v), Span: duration.HumanDuration(span),
		Width: curveWidth, Height: curveHeight,
	}
}

func number(f float64) string { return strconv.FormatFloat(f, 'g', 4, 64) }

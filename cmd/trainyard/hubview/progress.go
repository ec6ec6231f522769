package hubview

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// StaleReportAfter is how old the latest progress report of a job that has
// not finished may be before the CLI and the dashboard call it stale. The
// hub's copy trails the job by about a minute at most (the agent's and the
// hub's 30 s pacing), so ten minutes without one means the job stopped
// reporting: stuck, or its processes no longer call the status API.
const StaleReportAfter = 10 * time.Minute

// noValue is what a progress cell shows when there is no report.
const noValue = "-"

// ProgressSummary is the latest progress report of a job (the hub
// TrainJob's status.trainerStatus) without its metrics.
type ProgressSummary struct {
	Percent          *int32      `json:"percent,omitempty"`
	RemainingSeconds *int32      `json:"remainingSeconds,omitempty"`
	Reported         metav1.Time `json:"reported"`
}

// progressOf is the summary of tj's latest report, or nil.
func progressOf(tj *trainer.TrainJob) *ProgressSummary {
	ts := tj.Status.TrainerStatus
	if ts == nil {
		return nil
	}
	return &ProgressSummary{Percent: ts.ProgressPercentage, RemainingSeconds: ts.EstimatedRemainingSeconds, Reported: ts.LastUpdatedTime}
}

// finished says whether a job's phase (a Dispatch phase or a Kueue state)
// is one no report can follow.
func finished(phase string) bool {
	return phase == StateFinished || v1alpha1.DispatchPhase(phase).IsFinal()
}

// StaleReport says whether the report made at reported of a job in phase is
// stale at now.
func StaleReport(phase string, reported metav1.Time, now time.Time) bool {
	return !finished(phase) && !reported.IsZero() && now.Sub(reported.Time) > StaleReportAfter
}

// ProgressCell is the PROGRESS column: "42%", "42% (stale 12m)" when the
// report is stale, "-" without a report or a percentage.
func ProgressCell(p *ProgressSummary, phase string, now time.Time) string {
	if p == nil || p.Percent == nil {
		return noValue
	}
	s := fmt.Sprintf("%d%%", *p.Percent)
	if StaleReport(phase, p.Reported, now) {
		s += " (stale " + duration.HumanDuration(now.Sub(p.Reported.Time)) + ")"
	}
	return s
}

// ETACell is the ETA column: the time the job's last report estimated it
// still needs, less the time since that report; "-" without an estimate,
// for a finished job, or when the report is stale (its estimate says
// nothing any more).
func ETACell(p *ProgressSummary, phase string, now time.Time) string {
	if p == nil || p.RemainingSeconds == nil || finished(phase) || StaleReport(phase, p.Reported, now) {
		return noValue
	}
	left := time.Duration(*p.RemainingSeconds) * time.Second
	if !p.Reported.IsZero() {
		left -= max(0, now.Sub(p.Reported.Time))
	}
	if left <= 0 {
		return "any moment"
	}
	return duration.HumanDuration(left)
}

// ProgressHistoryOf is tj's progress history as the hub copied it onto the
// TrainJob (v1alpha1.AnnotationProgressHistory), or nil.
func ProgressHistoryOf(tj *trainer.TrainJob) *v1alpha1.ProgressHistory {
	raw := tj.Annotations[v1alpha1.AnnotationProgressHistory]
	if raw == "" {
		return nil
	}
	var h v1alpha1.ProgressHistory
	if err := json.Unmarshal([]byte(raw), &h); err != nil {
		return nil
	}
	h.Bound()
	return &h
}

// ProgressText is a one-line account of a report for describe and the
// dashboard: "42%, about 65m left" with what is known.
func ProgressText(ts *trainer.TrainerStatus, phase string, now time.Time) string {
	if ts == nil {
		return "<none> (the job's processes have not reported progress)"
	}
	p := &ProgressSummary{Percent: ts.ProgressPercentage, RemainingSeconds: ts.EstimatedRemainingSeconds, Reported: ts.LastUpdatedTime}
	s := "percentage not reported"
	if p.Percent != nil {
		s = strconv.Itoa(int(*p.Percent)) + "%"
	}
	if eta := ETACell(p, phase, now); eta != noValue {
		s += ", ETA " + eta
	}
	return s
}

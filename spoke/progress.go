package spoke

import (
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// carryProgress puts the job's latest report into status when it is due
// (statusapi.Reports paces each Dispatch; the report of work that has just
// ended is due at once), adds it to the status's bounded progress history,
// and returns it, for progressWritten.
func (r *DispatchReconciler) carryProgress(d *v1alpha1.Dispatch, status *v1alpha1.DispatchStatus) *trainer.TrainerStatus {
	if r.Progress == nil {
		return nil
	}
	final, now := status.Phase.IsFinal(), r.Clock.Now()
	report := r.Progress.Due(d.UID, now, final)
	if report != nil && !equality.Semantic.DeepEqual(report, status.TrainerStatus) {
		status.TrainerStatus = report
		// The history rides on the same write; the Dispatch holds it, so
		// it outlives a restart of the agent.
		if h, changed := v1alpha1.RecordProgress(status.ProgressHistory, historyPoint(report, now), final); changed {
			status.ProgressHistory = h
		}
	}
	return report
}

// historyPoint is report as the history keeps it: at its own time, but
// never later than now. The time is the process's (its node's clock); one
// far ahead would otherwise keep every later report out of the history.
func historyPoint(report *trainer.TrainerStatus, now time.Time) *trainer.TrainerStatus {
	if !report.LastUpdatedTime.After(now) {
		return report
	}
	p := report.DeepCopy()
	p.LastUpdatedTime = metav1.NewTime(now)
	return p
}

// progressWritten records that report is on the hub.
func (r *DispatchReconciler) progressWritten(d *v1alpha1.Dispatch, report *trainer.TrainerStatus) {
	if r.Progress != nil && report != nil {
		r.Progress.Written(d.UID, report, r.Clock.Now())
	}
}

// forgetProgress drops what is kept for a Dispatch whose work has ended or
// is being cancelled.
func (r *DispatchReconciler) forgetProgress(d *v1alpha1.Dispatch) {
	if r.Progress != nil {
		r.Progress.Forget(d.UID)
	}
}

package spoke

import (
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// carryProgress puts the job's latest report into status when it is due
// (statusapi.Reports paces each Dispatch; the report of work that has just
// ended is due at once) and returns it, for progressWritten.
func (r *DispatchReconciler) carryProgress(d *v1alpha1.Dispatch, status *v1alpha1.DispatchStatus) *trainer.TrainerStatus {
	if r.Progress == nil {
		return nil
	}
	report := r.Progress.Due(d.UID, r.Clock.Now(), status.Phase.IsFinal())
	if report != nil && !equality.Semantic.DeepEqual(report, status.TrainerStatus) {
		status.TrainerStatus = report
	}
	return report
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

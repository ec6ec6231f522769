package dispatch

import (
	"context"
	"slices"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	trainerac "github.com/kubeflow/trainer/v2/pkg/client/applyconfiguration/trainer/v1alpha1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// FieldOwner is the field manager the hub writes TrainJob status as.
const FieldOwner = "trainyard-hub"

// ownedConditions are the TrainJob condition types the hub writes.
var ownedConditions = []string{ConditionCreated, ConditionRunning, trainer.TrainJobComplete, trainer.TrainJobFailed}

// applyTrainJobStatus writes the TrainJob status fields trainyard owns by
// server-side apply on the status subresource, as FieldOwner: jobsStatus and
// ownedConditions, taken from tj. Whatever else the status holds, fields of
// a newer Trainer that trainyard's Go types do not know and conditions of
// other writers among them, is neither sent nor erased. Each apply carries
// every field trainyard owns, since one it leaves out is removed. The UID
// makes the apply fail rather than write into a TrainJob recreated under
// the same name.
func (r *Reconciler) applyTrainJobStatus(ctx context.Context, tj *trainer.TrainJob) error {
	return r.client.Status().Apply(ctx, trainJobStatusApply(tj), client.FieldOwner(FieldOwner), client.ForceOwnership)
}

func trainJobStatusApply(tj *trainer.TrainJob) *trainerac.TrainJobApplyConfiguration {
	st := trainerac.TrainJobStatus()
	for _, js := range tj.Status.JobsStatus {
		a := trainerac.JobStatus().WithName(js.Name)
		if js.Active != nil {
			a.WithActive(*js.Active)
		}
		if js.Ready != nil {
			a.WithReady(*js.Ready)
		}
		if js.Succeeded != nil {
			a.WithSucceeded(*js.Succeeded)
		}
		if js.Failed != nil {
			a.WithFailed(*js.Failed)
		}
		if js.Suspended != nil {
			a.WithSuspended(*js.Suspended)
		}
		st.WithJobsStatus(a)
	}
	for _, c := range tj.Status.Conditions {
		if !slices.Contains(ownedConditions, c.Type) {
			continue
		}
		st.WithConditions(metav1ac.Condition().WithType(c.Type).WithStatus(c.Status).
			WithObservedGeneration(c.ObservedGeneration).WithLastTransitionTime(c.LastTransitionTime).
			WithReason(c.Reason).WithMessage(c.Message))
	}
	return trainerac.TrainJob(tj.Name, tj.Namespace).WithUID(tj.UID).WithStatus(st)
}

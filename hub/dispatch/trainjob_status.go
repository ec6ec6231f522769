package dispatch

import (
	"context"
	"fmt"
	"slices"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	trainerac "github.com/kubeflow/trainer/v2/pkg/client/applyconfiguration/trainer/v1alpha1"
	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/internal/text"
)

// FieldOwner is the field manager the hub writes TrainJob status as.
const FieldOwner = "trainyard-hub"

// ownedConditions are the TrainJob condition types the hub writes.
var ownedConditions = []string{v1alpha1.TrainJobCreated, v1alpha1.TrainJobRunning, trainer.TrainJobComplete, trainer.TrainJobFailed}

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
		a := metav1ac.Condition().WithType(c.Type).WithStatus(c.Status).
			WithLastTransitionTime(c.LastTransitionTime).WithReason(c.Reason).WithMessage(c.Message)
		if c.ObservedGeneration != 0 {
			a.WithObservedGeneration(c.ObservedGeneration)
		}
		st.WithConditions(a)
	}
	return trainerac.TrainJob(tj.Name, tj.Namespace).WithUID(tj.UID).WithStatus(st)
}

// mirrorToTrainJob copies the live Dispatch's progress into the hub
// TrainJob: jobsStatus (Kueue holds quota while it shows active pods) and
// the Complete/Failed conditions Kueue finishes the Workload by, and
// (relayProgress) the job's progress report. It returns when a progress
// report held back by the pacing is due (0: none is).
func (r *Reconciler) mirrorToTrainJob(ctx context.Context, s *state) (time.Duration, error) {
	tj, err := r.owningTrainJob(ctx, s.wl)
	if err != nil || tj == nil {
		return 0, err
	}
	if err := r.mirrorPhase(ctx, s, tj); err != nil {
		return 0, err
	}
	return r.relayProgress(ctx, s, tj)
}

// mirrorPhase writes jobsStatus and the conditions, as FieldOwner.
func (r *Reconciler) mirrorPhase(ctx context.Context, s *state, tj *trainer.TrainJob) error {
	orig := tj.DeepCopy()
	d := s.live
	tj.Status.JobsStatus = jobsStatus(d.Status.Replicas)
	// Trainer's own conditions are Complete and Failed; Created and Running
	// tell a user of the hub where the remote work is before it ends.
	where := fmt.Sprintf("on target %s (attempt %d)", d.Spec.TargetName, d.Spec.Attempt)
	if d.Status.Remote != nil {
		setConditionStatus(tj, v1alpha1.TrainJobCreated, metav1.ConditionTrue, v1alpha1.ReasonRemoteCreated,
			fmt.Sprintf("%s created %s", d.Status.Remote, where))
	}
	running := d.Status.Phase == v1alpha1.DispatchRunning
	if running || apimeta.FindStatusCondition(tj.Status.Conditions, v1alpha1.TrainJobRunning) != nil {
		st, reason, msg := metav1.ConditionFalse, d.Status.Reason, fmt.Sprintf("%s %s", d.Status.Phase, where)
		if running {
			st, reason, msg = metav1.ConditionTrue, v1alpha1.ReasonRemoteRunning, "running "+where
		}
		setConditionStatus(tj, v1alpha1.TrainJobRunning, st, reason, msg)
	}
	switch d.Status.Phase {
	case v1alpha1.DispatchSucceeded:
		setCondition(tj, trainer.TrainJobComplete, d.Status.Reason,
			fmt.Sprintf("completed on target %s (attempt %d)", d.Spec.TargetName, d.Spec.Attempt))
	case v1alpha1.DispatchFailed, v1alpha1.DispatchCancelled:
		if accepted(d) {
			msg := fmt.Sprintf("%s on target %s (attempt %d)", d.Status.Phase, d.Spec.TargetName, d.Spec.Attempt)
			if d.Status.Message != "" {
				msg += ": " + d.Status.Message
			}
			setCondition(tj, trainer.TrainJobFailed, d.Status.Reason, msg)
		}
	}
	if equality.Semantic.DeepEqual(orig.Status, tj.Status) {
		return nil
	}
	return r.applyTrainJobStatus(ctx, tj)
}

func setCondition(tj *trainer.TrainJob, typ, reason, msg string) {
	setConditionStatus(tj, typ, metav1.ConditionTrue, reason, msg)
}

func setConditionStatus(tj *trainer.TrainJob, typ string, st metav1.ConditionStatus, reason, msg string) {
	if reason == "" {
		reason = typ
	}
	// No observedGeneration, as Trainer's own controller sets none: these
	// conditions follow the remote work, not the spec, and Kueue's
	// unsuspend bumps the generation, which would cost one more status
	// write a job with nothing new in it.
	apimeta.SetStatusCondition(&tj.Status.Conditions, metav1.Condition{
		Type: typ, Status: st, Reason: reason, Message: text.Truncate(msg, 32768),
	})
}

func jobsStatus(replicas []v1alpha1.ReplicaStatus) []trainer.JobStatus {
	if len(replicas) == 0 {
		return nil
	}
	out := make([]trainer.JobStatus, 0, len(replicas))
	for _, rs := range replicas {
		out = append(out, trainer.JobStatus{
			Name: rs.Name, Active: ptr.To(rs.Active), Ready: ptr.To(rs.Ready),
			Succeeded: ptr.To(rs.Succeeded), Failed: ptr.To(rs.Failed), Suspended: ptr.To[int32](0),
		})
	}
	return out
}

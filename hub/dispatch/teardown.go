package dispatch

import (
	"context"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// tearDown deletes every Dispatch of the Workload and waits until the agents
// confirm their remote work is gone (they hold a finalizer until then).
// Dispatches on a lost target are released at once; the agent deletes their
// remote work by epoch when it returns. Only with nothing left does the
// TrainJob stop showing active pods, so Kueue releases the quota after the
// remote work has really stopped.
func (r *Reconciler) tearDown(ctx context.Context, s *state) (ctrl.Result, error) {
	left := 0
	for i := range s.dispatches {
		d := &s.dispatches[i]
		if apimeta.IsStatusConditionTrue(s.wl.Status.Conditions, kueue.WorkloadFinished) &&
			s.wl.DeletionTimestamp.IsZero() && d.Status.Phase.IsFinal() {
			continue // a record of where finished work ran
		}
		left++
		if err := letGo(ctx, r.client, d); err != nil {
			return ctrl.Result{}, err
		}
	}
	if left > 0 {
		return ctrl.Result{RequeueAfter: r.opts.RetryAfter}, nil
	}
	r.latency.forget(client.ObjectKeyFromObject(s.wl))
	r.progress.forget(client.ObjectKeyFromObject(s.wl))
	r.flight.StopWaiting(client.ObjectKeyFromObject(s.wl))
	if err := r.clearActive(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	if !s.wl.DeletionTimestamp.IsZero() || s.check == "" {
		if hasFinalizer(s.wl) {
			patch := client.MergeFrom(s.wl.DeepCopy())
			controllerutil.RemoveFinalizer(s.wl, v1alpha1.WorkloadFinalizer)
			return ctrl.Result{}, client.IgnoreNotFound(r.client.Patch(ctx, s.wl, patch))
		}
	}
	return ctrl.Result{}, nil
}

// clearActive zeroes the TrainJob's active pod counts once no remote work is
// left, unless the job finished (its final counts stay).
func (r *Reconciler) clearActive(ctx context.Context, s *state) error {
	tj, err := r.owningTrainJob(ctx, s.wl)
	if err != nil || tj == nil {
		return err
	}
	if apimeta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete) ||
		apimeta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobFailed) {
		return nil
	}
	changed := false
	for i := range tj.Status.JobsStatus {
		js := &tj.Status.JobsStatus[i]
		if ptr.Deref(js.Active, 0) != 0 || ptr.Deref(js.Ready, 0) != 0 {
			js.Active, js.Ready = ptr.To[int32](0), ptr.To[int32](0)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return r.applyTrainJobStatus(ctx, tj)
}

// mustTearDown: the Workload no longer holds quota for this attempt (it is
// deleted, evicted, deactivated, or its check asked for a retry), so its
// remote work must go. A Workload with no check of trainyard's that is not
// checkless (see state) is no longer trainyard's: what is left of its
// attempts goes, and with it the Workload's finalizer.
func (r *Reconciler) mustTearDown(s *state) bool {
	wl := s.wl
	switch {
	case !wl.DeletionTimestamp.IsZero(), s.check == "" && !s.checkless:
		return true
	case apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadFinished):
		// Finished work keeps its Dispatch as the record of where it ran.
		return s.live == nil || !s.live.Status.Phase.IsFinal()
	case apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadEvicted),
		!apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved):
		return true
	case s.checkState == kueue.CheckStateRetry, s.checkState == kueue.CheckStateRejected:
		return true
	}
	return false
}

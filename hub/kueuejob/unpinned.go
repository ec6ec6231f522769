package kueuejob

import (
	"context"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	kueueconstants "sigs.k8s.io/kueue/pkg/controller/constants"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/snapshot"
)

// UnpinnedReporter fails queued TrainJobs that carry no pin. TrainJob's
// pod sets come only from a pinned copy, so Kueue never queues such a job;
// without this it would wait silently forever. Failing it says why, and
// since a pin is set only at creation, nothing else could ever help it.
type UnpinnedReporter struct {
	Client   client.Client
	Recorder events.EventRecorder
}

// EventNotPinned is the event sent with the Failed condition.
const EventNotPinned = "RuntimeNotPinned"

// SetupWithManager registers the reporter for queued, unpinned TrainJobs.
func (r *UnpinnedReporter) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("unpinned-trainjobs").
		For(&trainer.TrainJob{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return queuedUnpinned(o.(*trainer.TrainJob))
		}))).
		Complete(r)
}

// queuedUnpinned: tj is in a Kueue queue without a pin, and not finished.
func queuedUnpinned(tj *trainer.TrainJob) bool {
	if tj.Labels[kueueconstants.QueueLabel] == "" || tj.DeletionTimestamp != nil {
		return false
	}
	if _, err := snapshot.PinnedRef(tj); err == nil {
		return false
	}
	_, _, finished := asKueue(tj).Finished(context.Background())
	return !finished
}

// Reconcile fails req's TrainJob if it is queued and unpinned.
func (r *UnpinnedReporter) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var tj trainer.TrainJob
	if err := r.Client.Get(ctx, req.NamespacedName, &tj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !queuedUnpinned(&tj) {
		return ctrl.Result{}, nil
	}
	_, why := snapshot.PinnedRef(&tj)
	msg := "trainyard: " + why.Error()
	patch := client.MergeFrom(tj.DeepCopy())
	apimeta.SetStatusCondition(&tj.Status.Conditions, metav1.Condition{
		Type: trainer.TrainJobFailed, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonRuntimeNotPinned,
		Message: msg, ObservedGeneration: tj.Generation,
	})
	if err := r.Client.Status().Patch(ctx, &tj, patch); err != nil {
		return ctrl.Result{}, err
	}
	r.Recorder.Eventf(&tj, nil, corev1.EventTypeWarning, EventNotPinned, "Fail", "%s", msg)
	return ctrl.Result{}, nil
}

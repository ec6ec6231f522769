package spoke

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/internal/metrics"
)

// DispatchReconciler runs the Dispatches of one target through its backend
// and reports their progress into Dispatch status.
type DispatchReconciler struct {
	Hub     client.Client
	Target  string
	Backend backends.Backend
	Clock   clock.Clock
	// Resync re-observes unfinished remote work this often, for backends
	// whose changes arrive without an event.
	Resync time.Duration
}

// Reconcile is one pass: cancel when deleted, otherwise finalizer, submit
// (create-or-adopt), observe, one status write.
func (r *DispatchReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var d v1alpha1.Dispatch
	if err := r.Hub.Get(ctx, req.NamespacedName, &d); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if d.Spec.TargetName != r.Target {
		return ctrl.Result{}, nil
	}
	res, err := r.sync(ctx, &d)
	if err != nil {
		metrics.SyncError("agent-dispatch")
	}
	return res, err
}

func (r *DispatchReconciler) sync(ctx context.Context, d *v1alpha1.Dispatch) (ctrl.Result, error) {
	if !d.DeletionTimestamp.IsZero() {
		return r.cancel(ctx, d)
	}
	// The finalizer goes on before any remote work exists, so deleting the
	// Dispatch can never leave remote work behind unnoticed.
	if !controllerutil.ContainsFinalizer(d, v1alpha1.RemoteCleanupFinalizer) {
		patch := client.MergeFrom(d.DeepCopy())
		controllerutil.AddFinalizer(d, v1alpha1.RemoteCleanupFinalizer)
		if err := r.Hub.Patch(ctx, d, patch); err != nil {
			return ctrl.Result{}, err
		}
	}
	if d.Status.Phase.IsFinal() {
		return ctrl.Result{}, nil
	}
	status := d.Status.DeepCopy()
	submitErr := r.observe(ctx, d, status)
	if err := r.writeStatus(ctx, d, status); err != nil {
		return ctrl.Result{}, err
	}
	if submitErr != nil {
		// The status says why; the error makes the controller retry with backoff.
		return ctrl.Result{}, submitErr
	}
	if status.Phase.IsFinal() {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{RequeueAfter: r.Resync}, nil
}

// observe fills status from the backend, submitting the remote work first
// when none has been recorded. It returns a transient submit failure.
func (r *DispatchReconciler) observe(ctx context.Context, d *v1alpha1.Dispatch, status *v1alpha1.DispatchStatus) error {
	now := metav1.NewTime(r.Clock.Now())
	hadRemote := status.Remote != nil
	if !hadRemote {
		start := time.Now()
		ref, err := r.Backend.Submit(ctx, d)
		metrics.BackendCall(r.Backend, metrics.OpSubmit, start, err != nil && !errors.Is(err, backends.ErrRejected))
		switch {
		case errors.Is(err, backends.ErrRejected):
			setPhase(status, v1alpha1.DispatchRejected, v1alpha1.ReasonRemoteRejected, err.Error(), now)
			return nil
		case err != nil:
			// Transient: stay Pending, say why, and retry with backoff.
			status.Message = "submit failed, retrying: " + err.Error()
			return err
		}
		status.Remote = ref
		setPhase(status, v1alpha1.DispatchSubmitted, v1alpha1.ReasonRemoteCreated, "remote work created", now)
	}
	start := time.Now()
	st, err := r.Backend.Observe(ctx, d)
	metrics.BackendCall(r.Backend, metrics.OpObserve, start, err != nil && !errors.Is(err, backends.ErrNotFound))
	switch {
	case errors.Is(err, backends.ErrNotFound) && hadRemote:
		setPhase(status, v1alpha1.DispatchFailed, v1alpha1.ReasonRemoteMissing,
			"the remote work disappeared without trainyard deleting it", now)
		return nil
	case err != nil:
		return nil // observed again on the next event or resync
	}
	status.Replicas = st.Replicas
	status.ExitCode = st.ExitCode
	if st.StartTime != nil && status.StartTime == nil {
		status.StartTime = st.StartTime
	}
	if st.Phase != "" && st.Phase != status.Phase {
		setPhase(status, st.Phase, reasonFor(st), st.Message, now)
	}
	if st.CompletionTime != nil && status.Phase.IsFinal() {
		status.CompletionTime = st.CompletionTime
	}
	return nil
}

func reasonFor(st *backends.Status) string {
	if st.Reason != "" {
		return st.Reason
	}
	switch st.Phase {
	case v1alpha1.DispatchRunning:
		return v1alpha1.ReasonRemoteRunning
	case v1alpha1.DispatchSucceeded:
		return v1alpha1.ReasonRemoteSucceeded
	case v1alpha1.DispatchFailed:
		return v1alpha1.ReasonRemoteFailed
	case v1alpha1.DispatchCancelled:
		return v1alpha1.ReasonRemoteCancelled
	}
	return v1alpha1.ReasonRemoteCreated
}

// setPhase moves status to phase and keeps the three conditions in step.
func setPhase(status *v1alpha1.DispatchStatus, phase v1alpha1.DispatchPhase, reason, msg string, now metav1.Time) {
	status.Phase, status.Reason, status.Message = phase, reason, msg
	cond := func(t string, on bool) {
		s := metav1.ConditionFalse
		if on {
			s = metav1.ConditionTrue
		}
		apimeta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, LastTransitionTime: now})
	}
	cond(v1alpha1.DispatchAccepted, phase != v1alpha1.DispatchRejected && phase != v1alpha1.DispatchPending)
	cond(v1alpha1.DispatchRunningCondition, phase == v1alpha1.DispatchRunning)
	cond(v1alpha1.DispatchFinished, phase.IsFinal())
	if phase.IsFinal() && status.CompletionTime == nil {
		status.CompletionTime = &now
	}
	if phase == v1alpha1.DispatchRunning && status.StartTime == nil {
		status.StartTime = &now
	}
}

// writeStatus writes status only when it changed.
func (r *DispatchReconciler) writeStatus(ctx context.Context, d *v1alpha1.Dispatch, status *v1alpha1.DispatchStatus) error {
	status.ObservedAttempt = d.Spec.Attempt
	if equality.Semantic.DeepEqual(&d.Status, status) {
		return nil
	}
	d.Status = *status
	return r.Hub.Status().Update(ctx, d)
}

// cancel removes the remote work of a deleted Dispatch and then releases it.
func (r *DispatchReconciler) cancel(ctx context.Context, d *v1alpha1.Dispatch) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(d, v1alpha1.RemoteCleanupFinalizer) {
		return ctrl.Result{}, nil
	}
	start := time.Now()
	gone, err := r.Backend.Cancel(ctx, d)
	metrics.BackendCall(r.Backend, metrics.OpCancel, start, err != nil)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !gone {
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	patch := client.MergeFrom(d.DeepCopy())
	controllerutil.RemoveFinalizer(d, v1alpha1.RemoteCleanupFinalizer)
	return ctrl.Result{}, client.IgnoreNotFound(r.Hub.Patch(ctx, d, patch))
}

package spoke

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/internal/metrics"
	"github.com/trainyard-dev/trainyard/spoke/statusapi"
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
	// Lease, when set, gates remote work on the agent's lease and reports
	// work it stopped for want of one.
	Lease *Lease
	// Live reads a Dispatch from the hub before its remote work is created,
	// so a cache that lags a requeue never starts a stale attempt (nil: Hub).
	Live client.Reader
	// Recorder records what the agent did on the hub Dispatch, after the
	// status write that says it (nil: none).
	Recorder record.EventRecorder
	// Readings tells from which capacity reading of the heartbeat a
	// running Dispatch's work is counted (nil: not told).
	Readings *CapacityReadings

	// Progress holds the reports the job's processes posted to the
	// agent's status endpoint, carried into status at its pace (nil: none).
	Progress *statusapi.Reports

	// own skips passes that read a Dispatch older than the agent's own
	// last write of it.
	own ownWrites
	// pace holds back writes of replica counts alone.
	pace replicaPacer
}

// leaseWait paces a Dispatch while the agent holds no lease.
const leaseWait = time.Second

// Reconcile is one pass: cancel when deleted, otherwise finalizer, submit
// (create-or-adopt), observe, one status write.
func (r *DispatchReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var d v1alpha1.Dispatch
	if err := r.Hub.Get(ctx, req.NamespacedName, &d); err != nil {
		if apierrors.IsNotFound(err) {
			r.own.forget(req.NamespacedName)
			r.pace.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if d.Spec.TargetName != r.Target {
		return ctrl.Result{}, nil
	}
	if r.own.behind(req.NamespacedName, d.ResourceVersion) {
		// The watch event of the agent's own write queues it again.
		return ctrl.Result{}, nil
	}
	res, err := r.sync(ctx, &d)
	if err != nil {
		metrics.SyncError(dispatchComponent)
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
		if err := r.writeRecorded(d, func() error { return r.Hub.Patch(ctx, d, patch) }); err != nil {
			return ctrl.Result{}, err
		}
	}
	if d.Status.Phase.IsFinal() {
		r.forgetProgress(d)
		return ctrl.Result{}, nil
	}
	if r.Lease != nil && !r.Lease.Held() {
		return ctrl.Result{RequeueAfter: leaseWait}, nil
	}
	if r.Lease.Fenced(d) {
		return r.reportFenced(ctx, d)
	}
	if d.Status.Remote == nil {
		if current, err := r.stillCurrent(ctx, d); err != nil || !current {
			return ctrl.Result{}, err
		}
	}
	status := d.Status.DeepCopy()
	submitErr := r.observe(ctx, d, status)
	if stoppedByFence(ctx, d, status, r.Lease) {
		return r.reportFenced(ctx, d)
	}
	events := r.events(&d.Status, status)
	report := r.carryProgress(d, status)
	key := client.ObjectKeyFromObject(d)
	held := r.pace.hold(key, &d.Status, status, r.Clock.Now())
	if err := r.writeStatus(ctx, d, status); err != nil {
		return ctrl.Result{}, err
	}
	r.progressWritten(d, report)
	for _, e := range events {
		r.event(d, e)
	}
	if submitErr != nil {
		// The status says why; the error makes the controller retry with backoff.
		return ctrl.Result{}, submitErr
	}
	if status.Phase.IsFinal() {
		r.pace.forget(key)
		return ctrl.Result{}, nil
	}
	if held > 0 && (r.Resync == 0 || held < r.Resync) {
		return ctrl.Result{RequeueAfter: held}, nil
	}
	return ctrl.Result{RequeueAfter: r.Resync}, nil
}

// stoppedByFence reports whether remote work this pass found gone (or, on
// Slurm, cancelled) was stopped by a lease fence: that is not a loss, and
// the hub requeues it. Either the watchdog stopped it during this pass, or
// this replica took over a lease that had lapsed and the work predates it,
// so a predecessor may have stopped it and forgotten with its restart, or
// another replica (a standby whose evidence trailed) recorded stopping it.
func stoppedByFence(ctx context.Context, d *v1alpha1.Dispatch, status *v1alpha1.DispatchStatus, l *Lease) bool {
	if d.Status.Phase.IsFinal() {
		return false
	}
	switch status.Reason {
	case v1alpha1.ReasonRemoteMissing:
		return l.Fenced(d) || l.MayHaveFenced(d) || l.RecordedFence(ctx, d)
	case v1alpha1.ReasonRemoteCancelled:
		return l.MayHaveFenced(d) || l.RecordedFence(ctx, d)
	}
	return false
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
			// Maybe transient: stay Pending, say why, and retry with
			// backoff, within the bounds of submitFailed.
			return submitFailed(ctx, status, err, now)
		}
		status.Remote, status.SubmitFailures = ref, 0
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
	if st.UserID != nil && status.Remote != nil && status.Remote.UserID == nil {
		// Kept for `trainyard logs` once the backend has forgotten the work.
		status.Remote.UserID = st.UserID
	}
	if st.StartTime != nil && status.StartTime == nil {
		status.StartTime = st.StartTime
	}
	if st.Phase != "" && st.Phase != status.Phase {
		setPhase(status, st.Phase, reasonFor(st), st.Message, now)
	}
	if status.Phase == v1alpha1.DispatchRunning && status.CountedFromReading == 0 {
		// Read after Observe said running: the next reading counts it.
		status.CountedFromReading = r.Readings.NextCounting()
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
	if phase != v1alpha1.DispatchRunning {
		// Work that runs again (a Slurm requeue) is counted afresh.
		status.CountedFromReading = 0
	}
}

// writeStatus writes status only when it changed.
func (r *DispatchReconciler) writeStatus(ctx context.Context, d *v1alpha1.Dispatch, status *v1alpha1.DispatchStatus) error {
	status.ObservedAttempt = d.Spec.Attempt
	if equality.Semantic.DeepEqual(&d.Status, status) {
		return nil
	}
	d.Status = *status
	if err := r.writeRecorded(d, func() error { return r.Hub.Status().Update(ctx, d) }); err != nil {
		return err
	}
	r.pace.wrote(client.ObjectKeyFromObject(d), r.Clock.Now())
	return nil
}

// writeRecorded runs write, which updates d in place, and remembers the
// version it replaced.
func (r *DispatchReconciler) writeRecorded(d *v1alpha1.Dispatch, write func() error) error {
	before := d.ResourceVersion
	if err := write(); err != nil {
		return err
	}
	r.own.wrote(client.ObjectKeyFromObject(d), before)
	return nil
}

// reportFenced says on d that the agent stopped its remote work when its
// lease ran out; the hub requeues the job. It says so only once every
// process of that work has ended (the backend's Cancel, which also stops
// whatever the fence's delete left), so the requeued copy never overlaps it.
func (r *DispatchReconciler) reportFenced(ctx context.Context, d *v1alpha1.Dispatch) (ctrl.Result, error) {
	start := time.Now()
	gone, err := r.Backend.Cancel(ctx, d)
	metrics.BackendCall(r.Backend, metrics.OpCancel, start, err != nil)
	if err != nil || !gone {
		return ctrl.Result{RequeueAfter: time.Second}, err
	}
	status := d.Status.DeepCopy()
	setPhase(status, v1alpha1.DispatchFailed, v1alpha1.ReasonAgentFenced,
		"the agent could not renew its lease on the hub and stopped the remote work", metav1.NewTime(r.Clock.Now()))
	if err := r.writeStatus(ctx, d, status); err != nil {
		return ctrl.Result{}, err
	}
	r.event(d, dispatchEvent{corev1.EventTypeWarning, EventSelfFenced,
		"stopped the remote work: the agent could not renew its lease on the hub"})
	r.Lease.Reported(ctx, d)
	return ctrl.Result{}, nil
}

// stillCurrent reads d live: remote work is made only for a Dispatch that
// exists, is not being deleted and is still of the same attempt.
func (r *DispatchReconciler) stillCurrent(ctx context.Context, d *v1alpha1.Dispatch) (bool, error) {
	live := r.Live
	if live == nil {
		live = r.Hub
	}
	var cur v1alpha1.Dispatch
	if err := live.Get(ctx, client.ObjectKeyFromObject(d), &cur); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return cur.UID == d.UID && cur.DeletionTimestamp.IsZero() && cur.Spec.Attempt == d.Spec.Attempt, nil
}

// cancel removes the remote work of a deleted Dispatch and then releases it.
func (r *DispatchReconciler) cancel(ctx context.Context, d *v1alpha1.Dispatch) (ctrl.Result, error) {
	r.forgetProgress(d)
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
	if err := r.Hub.Patch(ctx, d, patch); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if ref := d.Status.Remote; ref != nil {
		r.event(d, dispatchEvent{corev1.EventTypeNormal, EventRemoteCancelled, "deleted " + ref.String()})
	}
	return ctrl.Result{}, nil
}

// dispatchComponent names the Dispatch reconciler's failed syncs
// (trainyard_sync_errors_total), declared at start and counted on failure.
const dispatchComponent = "agent-dispatch"

package dispatch

import (
	"context"
	"fmt"
	"sync"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/kueue/pkg/workload"
	"sigs.k8s.io/kueue/pkg/workload/patching"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/internal/metrics"
	"github.com/trainyard-dev/trainyard/internal/text"
)

// Backoff of Retry: the first retry waits retryBackoffBaseSeconds, each
// next one twice as long, up to retryBackoffMaxSeconds.
const (
	retryBackoffBaseSeconds = 5
	retryBackoffMaxSeconds  = 120
)

// setCheck writes trainyard's admission check state, only on change, the
// way Kueue's own admission-check controllers do.
func (r *Reconciler) setCheck(ctx context.Context, s *state, st kueue.CheckState, msg string) error {
	if s.check == "" {
		return nil
	}
	for _, c := range s.wl.Status.AdmissionChecks {
		if c.Name == s.check && c.State == st && c.Message == msg {
			return nil
		}
	}
	if msg == "" {
		msg = "trainyard: " + string(st)
	}
	next := kueue.AdmissionCheckState{Name: s.check, State: st, Message: text.Truncate(msg, 1024)}
	if st == kueue.CheckStateRetry {
		// Kueue counts the retries of a check; each waits twice as long
		// before the job is queued again, so a job that keeps bouncing
		// does not loop.
		for _, c := range s.wl.Status.AdmissionChecks {
			if c.Name == s.check {
				next.RetryCount = c.RetryCount
			}
		}
		workload.UpdateAdmissionCheckRequeueState(&next, retryBackoffBaseSeconds, retryBackoffMaxSeconds, r.clock)
	}
	err := patching.PatchAdmissionStatus(ctx, r.client, s.wl, r.clock, func(wl *kueue.Workload) (bool, error) {
		return patching.SetAdmissionCheckState(&wl.Status.AdmissionChecks, next, r.clock), nil
	})
	if err == nil {
		s.checkState = st
	}
	return err
}

// syncCheckState maps the live Dispatch's phase to the check state.
func (r *Reconciler) syncCheckState(ctx context.Context, s *state) error {
	d := s.live
	where := fmt.Sprintf("target %s (attempt %d)", d.Spec.TargetName, d.Spec.Attempt)
	switch d.Status.Phase {
	case "", v1alpha1.DispatchPending:
		return r.setCheck(ctx, s, kueue.CheckStatePending, "dispatched to "+where+", waiting for its agent")
	case v1alpha1.DispatchSubmitted, v1alpha1.DispatchRunning, v1alpha1.DispatchSucceeded:
		if d.Status.Phase != v1alpha1.DispatchSubmitted {
			r.observeRunning(s)
		}
		msg := "accepted by " + where
		if d.Status.Remote != nil {
			msg = fmt.Sprintf("running on %s as %s", where, d.Status.Remote)
		}
		return r.setCheck(ctx, s, kueue.CheckStateReady, msg)
	case v1alpha1.DispatchRejected:
		// One target's refusal never rejects a job another could run.
		return r.refused(ctx, s)
	case v1alpha1.DispatchFailed, v1alpha1.DispatchCancelled:
		if accepted(d) {
			// The remote took the job: its failure is the TrainJob's
			// (mirrored below), whether or not the hub saw it run first.
			return r.setCheck(ctx, s, kueue.CheckStateReady, fmt.Sprintf("remote work on %s ended %s", where, d.Status.Phase))
		}
		return r.requeue(ctx, s, fmt.Sprintf("remote work on %s ended %s before it was accepted: %s", where, d.Status.Phase, d.Status.Message))
	}
	return nil
}

// accepted reports whether d's own record says its remote work was made:
// the agent recorded the remote reference or set Accepted. This, not what
// the hub happened to observe before, tells a failed job (the TrainJob
// fails) from one that never started (the job is requeued).
func accepted(d *v1alpha1.Dispatch) bool {
	return d.Status.Remote != nil || apimeta.IsStatusConditionTrue(d.Status.Conditions, v1alpha1.DispatchAccepted)
}

// requeue asks Kueue to evict and requeue the Workload; tear-down of the
// current attempt follows on the next pass.
func (r *Reconciler) requeue(ctx context.Context, s *state, why string) error {
	if s.checkless {
		// Kueue holds no quota for the job and no check to retry: the
		// attempt goes, and the next pass places the job again.
		r.recorder.Event(s.wl, corev1.EventTypeWarning, EventRequeued, why)
		if s.live == nil {
			return nil
		}
		return letGo(ctx, r.client, s.live)
	}
	if err := r.setCheck(ctx, s, kueue.CheckStateRetry, why); err != nil {
		return err
	}
	target := ""
	if s.live != nil {
		target = s.live.Spec.TargetName
	}
	metrics.Dispatched(target, metrics.ResultRequeued)
	r.recorder.Event(s.wl, corev1.EventTypeWarning, EventRequeued, why)
	return nil
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
		setConditionStatus(tj, ConditionCreated, metav1.ConditionTrue, v1alpha1.ReasonRemoteCreated,
			fmt.Sprintf("%s created %s", d.Status.Remote, where))
	}
	running := d.Status.Phase == v1alpha1.DispatchRunning
	if running || apimeta.FindStatusCondition(tj.Status.Conditions, ConditionRunning) != nil {
		st, reason, msg := metav1.ConditionFalse, d.Status.Reason, fmt.Sprintf("%s %s", d.Status.Phase, where)
		if running {
			st, reason, msg = metav1.ConditionTrue, v1alpha1.ReasonRemoteRunning, "running "+where
		}
		setConditionStatus(tj, ConditionRunning, st, reason, msg)
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

// TrainJob condition types trainyard adds beside Trainer's Complete/Failed.
const (
	ConditionCreated = "Created"
	ConditionRunning = "Running"
)

func setCondition(tj *trainer.TrainJob, typ, reason, msg string) {
	setConditionStatus(tj, typ, metav1.ConditionTrue, reason, msg)
}

func setConditionStatus(tj *trainer.TrainJob, typ string, st metav1.ConditionStatus, reason, msg string) {
	if reason == "" {
		reason = typ
	}
	apimeta.SetStatusCondition(&tj.Status.Conditions, metav1.Condition{
		Type: typ, Status: st, Reason: reason, Message: text.Truncate(msg, 32768), ObservedGeneration: tj.Generation,
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

// latencyTracker observes admission-to-running once per Workload attempt.
// It keeps one entry per Workload, the attempt last observed, dropped when
// the Workload is torn down or gone: its size is bounded by the Workloads
// that exist.
type latencyTracker struct {
	mu   sync.Mutex
	seen map[types.NamespacedName]string
}

func newLatencyTracker() *latencyTracker {
	return &latencyTracker{seen: map[types.NamespacedName]string{}}
}

// first reports whether attempt (the Workload's UID and attempt) of wl is
// observed for the first time.
func (l *latencyTracker) first(wl types.NamespacedName, attempt string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen[wl] == attempt {
		return false
	}
	l.seen[wl] = attempt
	return true
}

func (l *latencyTracker) forget(wl types.NamespacedName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.seen, wl)
}

func (r *Reconciler) observeRunning(s *state) {
	c := apimeta.FindStatusCondition(s.wl.Status.Conditions, kueue.WorkloadQuotaReserved)
	if c == nil || !r.latency.first(client.ObjectKeyFromObject(s.wl), fmt.Sprintf("%s/%d", s.wl.UID, s.live.Spec.Attempt)) {
		return
	}
	start := c.LastTransitionTime.Time
	if s.live.Status.StartTime != nil {
		metrics.ObserveAdmissionToRunning(s.live.Spec.TargetName, s.live.Status.StartTime.Sub(start))
		return
	}
	metrics.ObserveAdmissionToRunning(s.live.Spec.TargetName, r.clock.Since(start))
}

package dispatch

import (
	"context"
	"fmt"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		if r.answerDue(s) {
			return nil
		}
		msg := "dispatched to " + where + ", waiting for its agent"
		if d.Annotations[v1alpha1.AnnotationQueued] == "true" {
			msg = "dispatched to " + where + " to wait in its own queue (no target had room), waiting for its agent"
		}
		return r.setCheck(ctx, s, kueue.CheckStatePending, msg)
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

// answerDue reports whether the live Dispatch's agent may still answer
// within one retry: its answer sets the check Ready, so saying "dispatched,
// waiting for its agent" first would be one or two more Workload writes a
// job (and an event of Kueue's each) that nobody reads in the second
// before the answer. Until then the check keeps what it said (as Kueue
// made it, waiting for room, an earlier attempt's), and the Workload's
// Dispatched event names the target; the pass one retry later says it if
// the agent has not answered.
func (r *Reconciler) answerDue(s *state) bool {
	return r.clock.Since(s.live.CreationTimestamp.Time) < r.opts.RetryAfter
}

// accepted reports whether d's own record says its remote work was made:
// the agent recorded the remote reference or set Accepted. This, not what
// the hub happened to observe before, tells a failed job (the TrainJob
// fails) from one that never started (the job is requeued).
func accepted(d *v1alpha1.Dispatch) bool {
	return d.Status.Remote != nil || apimeta.IsStatusConditionTrue(d.Status.Conditions, v1alpha1.DispatchAccepted)
}

// reject refuses the job for good: the check goes Rejected (Kueue then
// deactivates the Workload and releases its quota) and the TrainJob gets
// Failed with the reason, which stays where the user looks after Kueue
// has reset the check. A flavor-less job has no check; the Failed
// condition alone ends it.
func (r *Reconciler) reject(ctx context.Context, s *state, target, msg string) error {
	metrics.Dispatched(target, metrics.ResultRejected)
	if err := r.setCheck(ctx, s, kueue.CheckStateRejected, msg); err != nil {
		return err
	}
	tj, err := r.owningTrainJob(ctx, s.wl)
	if err != nil {
		return err
	}
	if tj != nil && !apimeta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobFailed) {
		setConditionStatus(tj, trainer.TrainJobFailed, metav1.ConditionTrue, v1alpha1.ReasonDispatchRejected, "trainyard: "+msg)
		if err := r.applyTrainJobStatus(ctx, tj); err != nil {
			return err
		}
	}
	r.recorder.Event(s.wl, corev1.EventTypeWarning, EventRejected, msg)
	return nil
}

package dispatch

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/internal/metrics"
)

// awayReasons are the reasons of a Target's Available=False that say its
// agent's lease is not fresh (hub/targets judges them): the agent is not
// renewing, whatever the hub makes of it.
var awayReasons = []string{
	v1alpha1.ReasonNoHeartbeat, v1alpha1.ReasonLeaseNotRenewed, v1alpha1.ReasonLeaseExpired,
	v1alpha1.ReasonHubDisrupted, v1alpha1.ReasonAwaitingAgent,
}

// targetLost reports whether d's Target is gone, whether its agent's lease
// ran out past the grace (hub/targets; never in disruption mode, never on
// a Hold target) or ran out on a target an operator set out of service,
// whether the Target is being deleted while its agent's lease is not fresh,
// or whether the agent reports it stopped d's work for want of a lease.
// Deleting a Target, like outOfService, is the operator's word that nothing
// of it runs any more; a Target whose agent still renews is drained by
// that agent. It is the one place that decides "lost": a lost target's
// Dispatches are requeued, and their RemoteCleanupFinalizer, which only
// their agent would release, is released by the hub (letGo).
func targetLost(ctx context.Context, c client.Reader, d *v1alpha1.Dispatch) (bool, string) {
	t, err := readTarget(ctx, c, d)
	if err != nil {
		return false, ""
	}
	return lostOn(t, d)
}

// readTarget reads d's Target: nil when it is gone, and no error then.
func readTarget(ctx context.Context, c client.Reader, d *v1alpha1.Dispatch) (*v1alpha1.Target, error) {
	var t v1alpha1.Target
	if err := c.Get(ctx, client.ObjectKey{Name: d.Spec.TargetName}, &t); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return &t, nil
}

// lostOn is targetLost's verdict on d's Target t, read already (nil: gone).
func lostOn(t *v1alpha1.Target, d *v1alpha1.Dispatch) (bool, string) {
	if d.Status.Reason == v1alpha1.ReasonAgentFenced {
		return true, fmt.Sprintf("target %s lost its lease and stopped attempt %d", d.Spec.TargetName, d.Spec.Attempt)
	}
	if t == nil {
		return true, fmt.Sprintf("target %s was deleted", d.Spec.TargetName)
	}
	cond := apimeta.FindStatusCondition(t.Status.Conditions, v1alpha1.TargetAvailable)
	if cond == nil || cond.Status != metav1.ConditionFalse {
		return false, ""
	}
	switch {
	// HeartbeatStale is what hubs before leases wrote for the same verdict.
	case cond.Reason == v1alpha1.ReasonLeaseExpired || cond.Reason == v1alpha1.ReasonHeartbeatStale ||
		cond.Reason == v1alpha1.ReasonOutOfService:
		return true, fmt.Sprintf("target %s lost: %s", t.Name, cond.Message)
	case !t.DeletionTimestamp.IsZero() && slices.Contains(awayReasons, cond.Reason):
		return true, fmt.Sprintf("target %s is being deleted and its agent's lease is not fresh (%s): %s", t.Name, cond.Reason, cond.Message)
	}
	return false, ""
}

// letGo deletes d, unless it is being deleted already, and releases its
// RemoteCleanupFinalizer when its target is lost (targetLost): the agent
// that would release it once the remote work is gone is not coming back,
// or deletes that work by epoch (its fence) when it does. Every path that
// deletes a Dispatch, or waits for one being deleted, goes through here,
// so none waits for an agent that is gone.
func letGo(ctx context.Context, c client.Client, d *v1alpha1.Dispatch) error {
	if d.DeletionTimestamp.IsZero() {
		if err := c.Delete(ctx, d); err != nil {
			return client.IgnoreNotFound(err)
		}
	}
	if !controllerutil.ContainsFinalizer(d, v1alpha1.RemoteCleanupFinalizer) {
		return nil
	}
	if lost, _ := targetLost(ctx, c, d); !lost {
		return nil
	}
	patch := client.MergeFrom(d.DeepCopy())
	controllerutil.RemoveFinalizer(d, v1alpha1.RemoteCleanupFinalizer)
	return client.IgnoreNotFound(c.Patch(ctx, d, patch))
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

// attemptLost handles a Ready check whose Dispatch is gone or going:
// someone deleted it while the job ran. The job is requeued (check Retry),
// so Kueue evicts it; the tear-down that follows waits for the agent to
// confirm the remote work is gone, and Kueue then releases the quota.
func (r *Reconciler) attemptLost(ctx context.Context, s *state) (ctrl.Result, error) {
	if busy, err := r.liveAttemptExists(ctx, s.wl); err != nil || busy {
		// The cache lags: look again shortly.
		return ctrl.Result{RequeueAfter: time.Second}, err
	}
	return ctrl.Result{}, r.requeue(ctx, s, fmt.Sprintf("the Dispatch of attempt %d was deleted while the job ran", currentAttempt(s.wl)))
}

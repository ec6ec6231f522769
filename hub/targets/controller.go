// Package targets keeps each Target's Available condition from its agent's
// heartbeat: a target whose agent has been silent past the lost-target
// timeout is unavailable, and the dispatch controller requeues its work.
package targets

import (
	"context"
	"fmt"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/internal/metrics"
)

// DefaultLostTimeout is how long an agent may be silent before its target is
// declared lost.
const DefaultLostTimeout = 60 * time.Second

// Reconciler sets Target Available from heartbeat age.
type Reconciler struct {
	Client      client.Client
	Clock       clock.Clock
	LostTimeout time.Duration
}

// Reconcile recomputes one Target's Available condition and requeues itself
// for the moment the heartbeat would turn stale.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var t v1alpha1.Target
	if err := r.Client.Get(ctx, req.NamespacedName, &t); err != nil {
		if client.IgnoreNotFound(err) == nil {
			metrics.ForgetTarget(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cond, recheck := r.availability(&t)
	if err := r.setAvailable(ctx, req.NamespacedName, cond); err != nil {
		metrics.SyncError("hub-targets")
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: recheck}, nil
}

func (r *Reconciler) availability(t *v1alpha1.Target) (metav1.Condition, time.Duration) {
	c := metav1.Condition{Type: v1alpha1.TargetAvailable, ObservedGeneration: t.Generation}
	if t.Status.LastHeartbeatTime == nil {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, v1alpha1.ReasonNoHeartbeat, "the target's agent has not reported yet"
		return c, 0
	}
	age := r.Clock.Since(t.Status.LastHeartbeatTime.Time)
	metrics.ObserveHeartbeat(t.Name, t.Status.LastHeartbeatTime.Time, r.LostTimeout)
	if age > r.LostTimeout {
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonHeartbeatStale
		c.Message = fmt.Sprintf("no heartbeat since %s, longer than the lost-target timeout of %s",
			t.Status.LastHeartbeatTime.UTC().Format(time.RFC3339), r.LostTimeout)
		return c, 0
	}
	if b := apimeta.FindStatusCondition(t.Status.Conditions, v1alpha1.TargetBackendReachable); b != nil && b.Status == metav1.ConditionFalse {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, v1alpha1.ReasonBackendError, b.Message
		return c, r.LostTimeout - age + time.Second
	}
	c.Status, c.Reason, c.Message = metav1.ConditionTrue, v1alpha1.ReasonHeartbeatFresh, "the agent reports on time"
	return c, r.LostTimeout - age + time.Second
}

// setAvailable writes the condition on the latest Target, only on change;
// the agent writes the rest of the status, so re-read on conflict.
func (r *Reconciler) setAvailable(ctx context.Context, key client.ObjectKey, want metav1.Condition) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var t v1alpha1.Target
		if err := r.Client.Get(ctx, key, &t); err != nil {
			return client.IgnoreNotFound(err)
		}
		old := apimeta.FindStatusCondition(t.Status.Conditions, want.Type)
		if old != nil && old.Status == want.Status && old.Reason == want.Reason && old.Message == want.Message &&
			old.ObservedGeneration == want.ObservedGeneration {
			return nil
		}
		want.LastTransitionTime = metav1.NewTime(r.Clock.Now())
		apimeta.SetStatusCondition(&t.Status.Conditions, want)
		return r.Client.Status().Update(ctx, &t)
	})
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.LostTimeout == 0 {
		r.LostTimeout = DefaultLostTimeout
	}
	return ctrl.NewControllerManagedBy(mgr).Named("trainyard-targets").For(&v1alpha1.Target{}).Complete(r)
}

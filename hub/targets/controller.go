// Package targets keeps each Target's Available condition from its agent's
// lease, judged on the hub's clock: a lease the hub has not seen renewed
// for its duration makes the target unavailable, and once a grace has
// passed as well the dispatch controller requeues its work, unless so many
// targets went silent at once that the hub assumes it is the one cut off
// (disruption mode). It also records the hub's identity in every Target.
package targets

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/internal/metrics"
)

// The hub reads the agents' Leases (a cache limited to LabelLeaseTarget)
// and the kube-system namespace, whose UID is its identity.
//
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get

// Event reasons of the targets controller.
const (
	EventDisruptionStarted = "HubDisruptionStarted"
	EventDisruptionEnded   = "HubDisruptionEnded"
)

// IdentityNamespace is the namespace whose UID identifies the hub.
const IdentityNamespace = "kube-system"

// Reconciler sets Target Available from the agent's lease.
type Reconciler struct {
	Client client.Client
	// Live reads the hub's identity once.
	Live     client.Reader
	Recorder record.EventRecorder
	Clock    clock.Clock
	Lease    LeaseSettings

	tracker *tracker
	idOnce  sync.Once
	hubID   string
	idErr   error
}

// Reconcile judges one Target's lease and requeues itself for the moment
// the judgement would change.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var t v1alpha1.Target
	if err := r.Client.Get(ctx, req.NamespacedName, &t); err != nil {
		if client.IgnoreNotFound(err) == nil {
			r.tracker.forget(req.Name)
			metrics.ForgetTarget(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	hubID, err := r.identity(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	obs, err := r.observe(ctx, &t)
	if err != nil {
		return ctrl.Result{}, err
	}
	now := r.Clock.Now()
	silent, total, disrupted, changed := r.tracker.fleet(now, r.Lease.DisruptionThreshold)
	age, blind := r.tracker.age(obs, now)
	v := judge(obs, age, r.Lease, disrupted, blind, policyOf(&t))
	cond := r.condition(&t, obs, age, v)
	if err := r.writeStatus(ctx, req.NamespacedName, cond, hubID); err != nil {
		metrics.SyncError(syncComponent)
		return ctrl.Result{}, err
	}
	metrics.LeaseAge.WithLabelValues(t.Name).Set(age.Seconds())
	metrics.ObserveHeartbeat(t.Name, obs.at, requeueAfter(obs, r.Lease))
	metrics.SilentTargets.Set(float64(silent))
	if changed {
		r.announce(ctx, &t, disrupted, silent, total)
	}
	return ctrl.Result{RequeueAfter: v.recheck}, nil
}

// observe reads the target's Lease from the cache and records it.
func (r *Reconciler) observe(ctx context.Context, t *v1alpha1.Target) (observation, error) {
	var l coordinationv1.Lease
	key := client.ObjectKey{Namespace: t.Spec.Agent.Namespace, Name: v1alpha1.LeaseName(t.Name)}
	version := ""
	duration := r.Lease.Duration
	// No Lease: nothing says the agent holds its jobs.
	enforced := v1alpha1.Advertised{MayRequeue: true}
	switch err := r.Client.Get(ctx, key, &l); {
	case client.IgnoreNotFound(err) != nil:
		return observation{}, err
	case err == nil:
		version = l.ResourceVersion
		enforced = v1alpha1.AdvertisedBy(&l)
		if s := l.Spec.LeaseDurationSeconds; s != nil && time.Duration(*s)*time.Second > duration {
			duration = time.Duration(*s) * time.Second
		}
	}
	return r.tracker.observe(t.Name, version, duration, enforced, r.Clock.Now()), nil
}

func (r *Reconciler) condition(t *v1alpha1.Target, o observation, age time.Duration, v verdict) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.TargetAvailable, ObservedGeneration: t.Generation, Status: metav1.ConditionFalse, Reason: v.reason}
	// Messages change only with the reason, so a fresh lease costs no write.
	switch v.reason {
	case v1alpha1.ReasonNoHeartbeat:
		c.Message = "the target's agent has not renewed its lease yet"
	case v1alpha1.ReasonHeartbeatFresh:
		c.Status, c.Message = metav1.ConditionTrue, "the agent renews its lease on time"
		if b := apimeta.FindStatusCondition(t.Status.Conditions, v1alpha1.TargetBackendReachable); b != nil && b.Status == metav1.ConditionFalse {
			c.Status, c.Reason, c.Message = metav1.ConditionFalse, v1alpha1.ReasonBackendError, b.Message
		}
	case v1alpha1.ReasonHubDisrupted:
		c.Message = fmt.Sprintf("lease not renewed for over %s, but most targets are silent or the hub cannot see its own API server: "+
			"the hub assumes it is cut off and requeues nothing", o.duration)
	case v1alpha1.ReasonLeaseNotRenewed:
		c.Message = fmt.Sprintf("lease not renewed for over %s (hub clock): no new jobs are placed here; running jobs run on", o.duration)
		if !t.Spec.OutOfService && t.Spec.LeaseLoss != v1alpha1.LeaseLossHold && o.enforced.MayRequeue {
			c.Message += fmt.Sprintf(" and are requeued after %s without a renewal (the agent stops them first)", requeueAfter(o, r.Lease))
		}
	case v1alpha1.ReasonAwaitingAgent:
		why := "leaseLoss is Hold"
		if t.Spec.LeaseLoss != v1alpha1.LeaseLossHold {
			why = "the agent last said it holds its jobs (leaseLoss Hold) and has not renewed since"
		}
		c.Message = fmt.Sprintf("lease not renewed for over %s (hub clock); %s: "+
			"the jobs stay until the agent returns, or until an operator who made sure nothing runs there sets spec.outOfService",
			requeueAfter(o, r.Lease), why)
	case v1alpha1.ReasonOutOfService:
		c.Message = fmt.Sprintf("lease not renewed for over %s and spec.outOfService is set: the jobs are requeued elsewhere", o.duration)
	case v1alpha1.ReasonLeaseExpired:
		c.Message = fmt.Sprintf("lease not renewed for over %s (hub clock): the agent has stopped its work, and it has ended",
			requeueAfter(o, r.Lease))
	}
	return c
}

// announce records entering or leaving disruption mode.
func (r *Reconciler) announce(ctx context.Context, t *v1alpha1.Target, disrupted bool, silent, total int) {
	msg := fmt.Sprintf("%d of %d targets silent (threshold %.2f)", silent, total, r.Lease.DisruptionThreshold)
	if disrupted {
		metrics.DisruptionMode.Set(1)
		log.FromContext(ctx).Info("disruption mode: the hub requeues nothing", "silent", silent, "targets", total)
		r.Recorder.Event(t, corev1.EventTypeWarning, EventDisruptionStarted, msg+": the hub assumes it is cut off and requeues nothing")
		return
	}
	metrics.DisruptionMode.Set(0)
	log.FromContext(ctx).Info("disruption mode over", "silent", silent, "targets", total)
	r.Recorder.Event(t, corev1.EventTypeNormal, EventDisruptionEnded, msg+": requeues resume")
}

// identity is the UID of the hub's kube-system namespace, read once.
func (r *Reconciler) identity(ctx context.Context) (string, error) {
	r.idOnce.Do(func() {
		var ns corev1.Namespace
		if r.idErr = r.Live.Get(ctx, client.ObjectKey{Name: IdentityNamespace}, &ns); r.idErr == nil {
			r.hubID = string(ns.UID)
		}
	})
	if r.idErr != nil {
		err := r.idErr
		r.idOnce = sync.Once{} // try again on the next pass
		return "", fmt.Errorf("read the hub identity (namespace %s): %w", IdentityNamespace, err)
	}
	return r.hubID, nil
}

// writeStatus writes the condition and the hub identity on the latest
// Target, only on change; the agent writes the rest of the status, so
// re-read on conflict.
func (r *Reconciler) writeStatus(ctx context.Context, key client.ObjectKey, want metav1.Condition, hubID string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var t v1alpha1.Target
		if err := r.Client.Get(ctx, key, &t); err != nil {
			return client.IgnoreNotFound(err)
		}
		old := apimeta.FindStatusCondition(t.Status.Conditions, want.Type)
		if old != nil && old.Status == want.Status && old.Reason == want.Reason && old.Message == want.Message &&
			old.ObservedGeneration == want.ObservedGeneration && t.Status.HubID == hubID {
			return nil
		}
		want.LastTransitionTime = metav1.NewTime(r.Clock.Now())
		apimeta.SetStatusCondition(&t.Status.Conditions, want)
		t.Status.HubID = hubID
		return r.Client.Status().Update(ctx, &t)
	})
}

// SetupWithManager registers the controller: Targets, and the agents'
// Leases, which wake their Target.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	metrics.DeclareSyncErrors(syncComponent)
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Live == nil {
		r.Live = mgr.GetAPIReader()
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorderFor("trainyard-targets")
	}
	r.Lease.defaults()
	r.tracker = newTracker(r.Clock.Now())
	if err := mgr.Add(&sightProbe{reader: r.Live, clock: r.Clock, tracker: r.tracker}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).Named("trainyard-targets").For(&v1alpha1.Target{}).
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(targetOfLease)).
		Complete(r)
}

func targetOfLease(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetAnnotations()[v1alpha1.AnnotationLeaseTarget]
	if name == "" || o.GetLabels()[v1alpha1.LabelLeaseTarget] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: name}}}
}

// syncComponent names this controller's failed syncs
// (trainyard_sync_errors_total), declared at start and counted on failure.
const syncComponent = "hub-targets"

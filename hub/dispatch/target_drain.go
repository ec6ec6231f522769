package dispatch

import (
	"context"
	"fmt"
	"slices"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// TargetFinalizer holds a Target while Dispatches name it. A Target being
// deleted is drained first: its jobs are requeued, its agent (which reads
// the Target to work) cancels their remote work and releases the
// Dispatches, and only then does the hub release the Target. When the
// agent's lease is not fresh, the deletion is the operator's word that
// nothing of the target runs: the hub releases the Dispatches itself
// (targetLost, letGo).
const TargetFinalizer = "trainyard.dev/dispatches"

// drainRecheck paces the drainer while a Target still has Dispatches.
const drainRecheck = 5 * time.Second

// The drainer adds and removes the finalizer.
// +kubebuilder:rbac:groups=trainyard.dev,resources=targets,verbs=get;list;watch;update;patch

// targetDraining reports whether the Target t (nil: gone) is being deleted.
func targetDraining(t *v1alpha1.Target) (bool, string) {
	if t == nil || t.DeletionTimestamp.IsZero() {
		return false, ""
	}
	return true, fmt.Sprintf("target %s is being deleted", t.Name)
}

// holdTarget puts TargetFinalizer on the Target placement chose before a
// Dispatch names it, so the Target cannot go while the Dispatch's remote
// work may exist. The API server refuses a new finalizer on a Target being
// deleted, which fails this placement; the next pass places elsewhere.
func (r *Reconciler) holdTarget(ctx context.Context, name string) error {
	var t v1alpha1.Target
	if err := r.client.Get(ctx, client.ObjectKey{Name: name}, &t); err != nil {
		return err
	}
	if controllerutil.ContainsFinalizer(&t, TargetFinalizer) {
		return nil
	}
	return addTargetFinalizer(ctx, r.client, &t)
}

// addTargetFinalizer patches with an optimistic lock: the finalizer list is
// replaced whole, so a stale copy must not drop another's finalizer.
func addTargetFinalizer(ctx context.Context, c client.Client, t *v1alpha1.Target) error {
	patch := client.MergeFromWithOptions(t.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(t, TargetFinalizer)
	return c.Patch(ctx, t, patch)
}

// targetDrainer keeps TargetFinalizer on every Target that Dispatches name
// and releases a Target being deleted once none is left.
type targetDrainer struct {
	client client.Client
	// live lists Dispatches from the API server: a Target must not be
	// released on a cache that has not yet seen a Dispatch.
	live client.Reader
}

func (d *targetDrainer) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var t v1alpha1.Target
	if err := d.client.Get(ctx, req.NamespacedName, &t); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	deleting := !t.DeletionTimestamp.IsZero()
	held := controllerutil.ContainsFinalizer(&t, TargetFinalizer)
	if !deleting && held {
		return ctrl.Result{}, nil
	}
	if deleting && !held {
		return ctrl.Result{}, nil
	}
	var reader client.Reader = d.client
	if deleting && d.live != nil {
		reader = d.live
	}
	on, err := dispatchesOn(ctx, reader, t.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	switch n := len(on); {
	case !deleting && n > 0:
		// Dispatches written before the hub held its Targets.
		return ctrl.Result{}, addTargetFinalizer(ctx, d.client, &t)
	case deleting && n > 0:
		// Their Workloads requeue the jobs and delete the Dispatches; the
		// ones being deleted wait for the agent, unless it is away
		// (targetLost): then they are let go here, whatever their Workload.
		for i := range on {
			if !on[i].DeletionTimestamp.IsZero() {
				if err := letGo(ctx, d.client, &on[i]); err != nil {
					return ctrl.Result{}, err
				}
			}
		}
		return ctrl.Result{RequeueAfter: drainRecheck}, nil
	case deleting:
		ctrl.LoggerFrom(ctx).Info("target drained; releasing it", "target", t.Name)
		patch := client.MergeFrom(t.DeepCopy())
		controllerutil.RemoveFinalizer(&t, TargetFinalizer)
		return ctrl.Result{}, client.IgnoreNotFound(d.client.Patch(ctx, &t, patch))
	}
	return ctrl.Result{}, nil
}

// dispatchesOn lists the Dispatches that name target, those being
// deleted included: their agent has yet to confirm the remote work gone.
func dispatchesOn(ctx context.Context, c client.Reader, target string) ([]v1alpha1.Dispatch, error) {
	var list v1alpha1.DispatchList
	if err := c.List(ctx, &list, client.MatchingLabels{v1alpha1.LabelTarget: v1alpha1.LabelValue(target)}); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(list.Items, func(d v1alpha1.Dispatch) bool { return d.Spec.TargetName != target }), nil
}

func (d *targetDrainer) setup(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("trainyard-target-drain").
		For(&v1alpha1.Target{}).
		Watches(&v1alpha1.Dispatch{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			disp, ok := o.(*v1alpha1.Dispatch)
			if !ok || disp.Spec.TargetName == "" {
				return nil
			}
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: disp.Spec.TargetName}}}
		}), builder.WithPredicates(dispatchComesOrGoes())).
		Complete(d)
}

// dispatchComesOrGoes passes the Dispatch events the drainer acts on: one
// created, one deleted, and one starting to be deleted. Its status writes
// (three or more a job) change nothing the drainer reads.
func dispatchComesOrGoes() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
	}}
}

package snapshot

import (
	"context"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// The collector of pinned copies, and what it needs besides the hub role's
// read access.
//
// +kubebuilder:rbac:groups=trainer.kubeflow.org,resources=trainingruntimes,verbs=update;delete

// DefaultGCGracePeriod is how long a pinned copy no TrainJob refers to is
// kept after it was created or last pinned to.
const DefaultGCGracePeriod = 10 * time.Minute

// runtimeRefIndex indexes TrainJobs by the pinned copy they are pinned to.
const runtimeRefIndex = "trainyard.dev/training-runtime-ref"

// GC deletes pinned runtime copies that no TrainJob refers to any more,
// once they have been idle for GracePeriod.
//
// It races with the pinning webhook, which may be pointing a new TrainJob
// at the copy it is collecting. Neither side loses: the webhook stamps the
// copy (v1alpha1.AnnotationPinnedAt) with an update at the version it read, the
// collector deletes only at the version it judged idle (a precondition),
// and a webhook that finds the copy gone creates it again. The grace period
// also covers the moment between the stamp and the new TrainJob reaching
// the collector's cache, and the collector lists the namespace's TrainJobs
// live before it deletes.
type GC struct {
	// Client reads from the manager's cache and deletes.
	Client client.Client
	// Reader reads live (the manager's API reader).
	Reader      client.Reader
	Clock       clock.PassiveClock
	GracePeriod time.Duration
}

// SetupWithManager registers the collector and its TrainJob index.
func (g *GC) SetupWithManager(mgr ctrl.Manager) error {
	if g.Clock == nil {
		g.Clock = clock.RealClock{}
	}
	if g.GracePeriod <= 0 {
		g.GracePeriod = DefaultGCGracePeriod
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &trainer.TrainJob{}, runtimeRefIndex, indexRuntimeRef); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).Named("pinned-runtime-gc").
		For(&trainer.TrainingRuntime{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return isPinned(o)
		}))).
		Watches(&trainer.TrainJob{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if name := refName(o.(*trainer.TrainJob)); name != "" {
				return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
			}
			return nil
		}), builder.WithPredicates(mayFreeACopy)).
		Complete(g)
}

// mayFreeACopy passes the TrainJob events after which a pinned copy may
// have no job left: a deletion, or an update that changes the job's pin
// (which the pinned-runtime policy refuses; counted here all the same). A new job only adds a reference, and the many updates of a
// running job (Kueue's, the hub's) change none: at 10,000 jobs of one copy,
// each would list all 10,000.
var mayFreeACopy = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		oldJob, okOld := e.ObjectOld.(*trainer.TrainJob)
		newJob, okNew := e.ObjectNew.(*trainer.TrainJob)
		return !okOld || !okNew || refName(oldJob) != refName(newJob)
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return true },
	GenericFunc: func(event.GenericEvent) bool { return true },
}

func indexRuntimeRef(o client.Object) []string {
	if name := refName(o.(*trainer.TrainJob)); name != "" {
		return []string{name}
	}
	return nil
}

// refName is the pinned copy tj is pinned to, from its pin annotations, or
// "" for a job that is not pinned.
func refName(tj *trainer.TrainJob) string {
	ref, err := PinnedRef(tj)
	if err != nil {
		return ""
	}
	return ref.Name
}

func isPinned(o client.Object) bool {
	_, hashed := o.GetAnnotations()[v1alpha1.AnnotationRuntimeHash]
	return o.GetLabels()[v1alpha1.LabelPinnedRuntime] == "true" || hashed
}

// Reconcile deletes req's pinned copy if it is unreferenced and idle.
func (g *GC) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var rt trainer.TrainingRuntime
	if err := g.Client.Get(ctx, req.NamespacedName, &rt); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !isPinned(&rt) || rt.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	// One job is enough to keep it; the jobs are only counted, not changed.
	var jobs trainer.TrainJobList
	if err := g.Client.List(ctx, &jobs, client.InNamespace(rt.Namespace), client.MatchingFields{runtimeRefIndex: rt.Name},
		client.Limit(1), client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, err
	}
	if len(jobs.Items) > 0 {
		return ctrl.Result{}, nil // the last one's deletion brings the copy back here
	}
	if idle := g.Clock.Since(lastPinned(&rt)); idle < g.GracePeriod {
		return ctrl.Result{RequeueAfter: g.GracePeriod - idle}, nil
	}
	if used, err := g.usedLive(ctx, &rt); err != nil || used {
		return ctrl.Result{}, err
	}
	err := g.Client.Delete(ctx, &rt, client.Preconditions{UID: &rt.UID, ResourceVersion: &rt.ResourceVersion})
	switch {
	case apierrors.IsNotFound(err):
		return ctrl.Result{}, nil
	case apierrors.IsConflict(err):
		// Pinned to again since the cache's version: judge it afresh.
		return ctrl.Result{RequeueAfter: time.Second}, nil
	case err != nil:
		return ctrl.Result{}, err
	}
	log.FromContext(ctx).Info("deleted unreferenced pinned runtime", "runtime", req.NamespacedName, "source", rt.Annotations[v1alpha1.AnnotationRuntimeSource])
	return ctrl.Result{}, nil
}

// usedLive lists the namespace's TrainJobs from the API server: one created
// a moment ago may not be in the cache yet.
func (g *GC) usedLive(ctx context.Context, rt *trainer.TrainingRuntime) (bool, error) {
	var jobs trainer.TrainJobList
	if err := g.Reader.List(ctx, &jobs, client.InNamespace(rt.Namespace)); err != nil {
		return false, err
	}
	for i := range jobs.Items {
		if refName(&jobs.Items[i]) == rt.Name {
			return true, nil
		}
	}
	return false, nil
}

// lastPinned is when a job was last pinned to rt: its stamp, or its
// creation when the stamp is missing, unreadable or older.
func lastPinned(rt *trainer.TrainingRuntime) time.Time {
	at := rt.CreationTimestamp.Time
	if t, err := time.Parse(time.RFC3339, rt.Annotations[v1alpha1.AnnotationPinnedAt]); err == nil && t.After(at) {
		at = t
	}
	return at
}

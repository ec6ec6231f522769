package dispatch

import (
	"context"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// Field indexes of the Dispatch cache, for the lookups passes make.
const (
	IndexWorkloadUID = "spec.workload.uid"
	IndexTarget      = "spec.targetName"
)

// wakeupBuffer is how many wake-ups a pass may leave for the controller's
// queue before its send waits.
const wakeupBuffer = 1024

// IndexDispatches registers the Dispatch field indexes.
func IndexDispatches(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &v1alpha1.Dispatch{}, IndexWorkloadUID, workloadUIDOf); err != nil {
		return err
	}
	return indexer.IndexField(ctx, &v1alpha1.Dispatch{}, IndexTarget, targetOf)
}

func workloadUIDOf(o client.Object) []string {
	return []string{string(o.(*v1alpha1.Dispatch).Spec.Workload.UID)}
}

func targetOf(o client.Object) []string { return []string{o.(*v1alpha1.Dispatch).Spec.TargetName} }

type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// dispatchHandler keeps the in-flight record current from the Dispatch
// watch and wakes the Dispatch's Workload; a Dispatch that stops holding
// GPUs also wakes the Workloads waiting for room. The controller starts its
// workers only once this handler has seen every Dispatch the cache holds,
// so no decision reads a record that misses one.
func (r *Reconciler) dispatchHandler() handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q queue) {
			r.onDispatch(e.Object, false, q)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q queue) {
			r.onDispatch(e.ObjectNew, false, q)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q queue) {
			r.onDispatch(e.Object, true, q)
		},
		GenericFunc: func(_ context.Context, e event.GenericEvent, q queue) {
			r.onDispatch(e.Object, false, q)
		},
	}
}

func (r *Reconciler) onDispatch(o client.Object, deleted bool, q queue) {
	d, ok := o.(*v1alpha1.Dispatch)
	if !ok {
		return
	}
	var wake []reconcile.Request
	if deleted {
		wake = r.flight.Forget(d)
	} else {
		wake = r.flight.Observe(d, gpusOf(d))
	}
	for _, req := range append(wake, workloadOfDispatch(d)...) {
		q.Add(req)
	}
}

// gpusOf reads the GPUs the hub recorded on d when it placed it.
func gpusOf(d *v1alpha1.Dispatch) int64 {
	n, _ := strconv.ParseInt(d.Annotations[v1alpha1.AnnotationGPUs], 10, 64)
	return n
}

// workloadOfDispatch reads the Workload from the Dispatch's spec: its
// labels hold the name only as a label value, shortened when it is long.
func workloadOfDispatch(d *v1alpha1.Dispatch) []reconcile.Request {
	if d.Spec.Workload.Name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{
		Namespace: d.Spec.Workload.Namespace, Name: d.Spec.Workload.Name}}}
}

// targetHandler wakes only the Workloads a Target change can affect: those
// with unfinished Dispatches on it when its availability flips or its
// deletion starts, and as many waiting for room as it may now take when it
// may have more (it appeared, became available, changed its spec or
// published more free resources). Those that waited for it all wake when
// it goes or its spec changes, since they may have nowhere left to wait.
// Heartbeats that change nothing else wake no one. Every change updates
// the in-flight record's view of the Target, from which wake-ups size the
// room.
func (r *Reconciler) targetHandler() handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q queue) {
			if t, ok := e.Object.(*v1alpha1.Target); ok {
				addAll(q, r.flight.NoteTarget(t))
			}
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q queue) {
			oldT, okOld := e.ObjectOld.(*v1alpha1.Target)
			newT, okNew := e.ObjectNew.(*v1alpha1.Target)
			if !okOld || !okNew {
				return
			}
			flipped := availability(oldT) != availability(newT)
			if flipped || oldT.DeletionTimestamp.IsZero() != newT.DeletionTimestamp.IsZero() {
				addAll(q, r.workloadsOnTarget(ctx, newT.Name))
			}
			if oldT.Generation != newT.Generation {
				// Those that waited on its old spec (a flavor it dropped).
				addAll(q, r.flight.WakeWanting(oldT))
			}
			if flipped || mayHaveMoreRoom(oldT, newT) {
				addAll(q, r.flight.NoteTarget(newT))
				return
			}
			addAll(q, r.flight.RecordTarget(newT))
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q queue) {
			if t, ok := e.Object.(*v1alpha1.Target); ok {
				addAll(q, r.flight.ForgetTarget(t))
			}
			addAll(q, r.workloadsOnTarget(ctx, e.Object.GetName()))
		},
	}
}

// waitSweepInterval is how often every target's room is offered to the
// waiting again, whether or not an event said it freed.
const waitSweepInterval = 30 * time.Second

// sweepWaiting offers each target's room to the waiting every interval
// until ctx ends: the guard against a wake-up that an estimate of the room
// missed (a status the watch showed before the Dispatches it counts).
func (r *Reconciler) sweepWaiting(ctx context.Context, interval time.Duration) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			r.wakeUp(ctx, r.flight.Sweep())
		}
	}
}

func addAll(q queue, reqs []reconcile.Request) {
	for _, req := range reqs {
		q.Add(req)
	}
}

// availability is what placement and targetLost read of a Target's state.
func availability(t *v1alpha1.Target) string {
	spec := strconv.FormatBool(t.Spec.Paused) + "/" + strconv.FormatBool(t.Spec.OutOfService)
	c := apimeta.FindStatusCondition(t.Status.Conditions, v1alpha1.TargetAvailable)
	if c == nil {
		return spec
	}
	return spec + "/" + string(c.Status) + "/" + c.Reason + "/" + t.Status.HubID
}

// mayHaveMoreRoom reports whether a job that found no room on old might
// find it on updated.
func mayHaveMoreRoom(old, updated *v1alpha1.Target) bool {
	return old.Generation != updated.Generation || updated.Status.FreeGPUs > old.Status.FreeGPUs ||
		updated.Status.MaxGPUsPerNode != old.Status.MaxGPUsPerNode ||
		!equality.Semantic.DeepEqual(old.Status.Free, updated.Status.Free) ||
		!equality.Semantic.DeepEqual(old.Status.Topology, updated.Status.Topology)
}

// workloadsOnTarget lists, through the target index, the Workloads whose
// Dispatches on target are not final: those a lost or draining target
// concerns. Finished attempts kept as records are left alone.
func (r *Reconciler) workloadsOnTarget(ctx context.Context, target string) []reconcile.Request {
	var list v1alpha1.DispatchList
	if err := r.client.List(ctx, &list, client.MatchingFields{IndexTarget: target}); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if d := &list.Items[i]; !d.Status.Phase.IsFinal() || !d.DeletionTimestamp.IsZero() {
			reqs = append(reqs, workloadOfDispatch(d)...)
		}
	}
	return reqs
}

// wakeUp hands Workloads to the controller's queue from inside a pass.
func (r *Reconciler) wakeUp(ctx context.Context, reqs []reconcile.Request) {
	for _, req := range reqs {
		wl := &kueue.Workload{}
		wl.Namespace, wl.Name = req.Namespace, req.Name
		select {
		case r.wakeups <- event.GenericEvent{Object: wl}:
		case <-ctx.Done():
			return
		}
	}
}

// CacheTransform slims a Dispatch for the hub's cache: the hub reads its
// placement, status and references, never the runtime and TrainJob specs
// it wrote (those are for agents; eligibility judges the draft the hub
// builds, not a cached copy), nor managed fields. Every Dispatch stays in
// the cache until deleted, finished ones as records, so what each keeps
// is what the cache costs. The hub writes Dispatches by patch and delete
// only, which never sends the dropped fields back.
func CacheTransform(o any) (any, error) {
	d, ok := o.(*v1alpha1.Dispatch)
	if !ok {
		return o, nil
	}
	d.ManagedFields = nil
	d.Spec.Runtime.Spec = runtime.RawExtension{}
	d.Spec.TrainJob.Spec = runtime.RawExtension{}
	return d, nil
}

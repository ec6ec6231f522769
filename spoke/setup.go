package spoke

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/internal/health"
	"github.com/trainyard-dev/trainyard/internal/metrics"
	"github.com/trainyard-dev/trainyard/spoke/statusapi"
)

// Defaults of Options.
const (
	DefaultHeartbeatInterval = 10 * time.Second
	DefaultFenceInterval     = 30 * time.Second
	DefaultResync            = 30 * time.Second
	DefaultConcurrency       = 8
	// MaxRetryDelay caps the back-off of a Dispatch whose backend fails.
	MaxRetryDelay = 15 * time.Second
)

// Options configure one agent.
type Options struct {
	// Target is the name of the Target this agent serves.
	Target string
	// Namespace is the target's agent namespace on the hub.
	Namespace string
	Backend   backends.Backend
	// RemoteEvents wake the Dispatch a remote change belongs to (for
	// example a watch on the spoke's JobSets).
	RemoteEvents      []source.Source
	HeartbeatInterval time.Duration
	FenceInterval     time.Duration
	Resync            time.Duration
	Concurrency       int
	Clock             clock.Clock
	// HeartbeatKick, when set, triggers a heartbeat between intervals.
	HeartbeatKick <-chan struct{}
	// LeaseDuration: without a renewal of its lease on the hub for this
	// long, the agent starts no new remote work (DefaultLeaseDuration).
	LeaseDuration time.Duration
	// FenceAfter: on a target whose leaseLoss is Requeue, the agent stops
	// its running work after this long without a renewal (DefaultFenceAfter).
	FenceAfter time.Duration
	// LeaseRenewInterval paces renewals (DefaultLeaseRenewInterval).
	LeaseRenewInterval time.Duration
	// FenceMaxDeletes bounds one fence pass (DefaultFenceMaxDeletes).
	FenceMaxDeletes int
	// HubID, when set, is the only hub identity the fence trusts; empty:
	// the first one the agent sees.
	HubID string
	// Caches the agent reads besides its manager's (the spoke's), which
	// /readyz waits for.
	Caches []cache.Cache
	// FenceRecord shares fence stops among the replicas (nil: none).
	FenceRecord *FenceRecord
	// Progress holds the reports of the agent's status endpoint, which
	// the agent carries into Dispatch status (nil: no endpoint).
	Progress *statusapi.Reports
	// ProgressInterval paces each Dispatch's progress writes
	// (statusapi.DefaultInterval).
	ProgressInterval time.Duration
}

// wakeBuffer holds Dispatches to report after the lease came back.
const wakeBuffer = 1024

// Setup adds the agent's controller, heartbeat and fence to mgr, whose
// cache must be limited to opts.Namespace on the hub.
func Setup(mgr ctrl.Manager, opts Options) error {
	if opts.Target == "" || opts.Namespace == "" || opts.Backend == nil {
		return fmt.Errorf("agent needs a target, its hub namespace and a backend")
	}
	if opts.HeartbeatInterval == 0 {
		opts.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if opts.FenceInterval == 0 {
		opts.FenceInterval = DefaultFenceInterval
	}
	if opts.Resync == 0 {
		opts.Resync = DefaultResync
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	lease := newLease(mgr, opts)
	readings := &CapacityReadings{}
	if err := mgr.Add(lease); err != nil {
		return err
	}
	wake := make(chan event.GenericEvent, wakeBuffer)
	lease.Wake = wake
	metrics.DeclareSyncErrors(dispatchComponent)
	r := &DispatchReconciler{Hub: mgr.GetClient(), Target: opts.Target, Backend: opts.Backend, Clock: opts.Clock, Resync: opts.Resync,
		Lease: lease, Live: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorderFor("trainyard-agent"), Readings: readings,
		Progress: opts.Progress}
	if opts.Progress != nil {
		// The status endpoint finds a report's Dispatch by UID.
		if err := statusapi.IndexDispatches(context.Background(), mgr.GetFieldIndexer()); err != nil {
			return err
		}
	}
	b := ctrl.NewControllerManagedBy(mgr).Named("trainyard-agent-" + opts.Target).
		For(&v1alpha1.Dispatch{}).
		WatchesRawSource(source.Channel(wake, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.Concurrency,
			// A backend that is down for minutes must be retried within
			// seconds of its return, not after a back-off of many minutes.
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](100*time.Millisecond, MaxRetryDelay)})
	for _, src := range opts.RemoteEvents {
		b = b.WatchesRawSource(src)
	}
	if err := b.Complete(r); err != nil {
		return err
	}
	logs := &LogsReconciler{Hub: mgr.GetClient(), Answers: mgr.GetAPIReader(), Backend: opts.Backend}
	if err := logs.SetupWithManager(mgr, opts.Target); err != nil {
		return err
	}
	hb := &Heartbeat{Hub: mgr.GetClient(), Target: opts.Target, Backend: opts.Backend, Clock: opts.Clock, Interval: opts.HeartbeatInterval,
		Kick: opts.HeartbeatKick, Elected: mgr.Elected(), Readings: readings}
	if err := mgr.Add(hb); err != nil {
		return err
	}
	if err := addReadyz(mgr, append([]cache.Cache{mgr.GetCache()}, opts.Caches...), lease, hb); err != nil {
		return err
	}
	if lister, ok := opts.Backend.(backends.RemoteLister); ok {
		f := &Fence{Hub: mgr.GetAPIReader(), Namespace: opts.Namespace, Target: opts.Target, Lister: lister, Interval: opts.FenceInterval,
			MaxDeletes: opts.FenceMaxDeletes, HubID: opts.HubID, Recorder: mgr.GetEventRecorderFor("trainyard-agent")}
		if err := mgr.Add(f); err != nil {
			return err
		}
	}
	return nil
}

// addReadyz makes /readyz wait for the caches, the lease (renewed or, on a
// standby, read since start, and held) and the backend (answering the
// elected replica's last capacity call).
func addReadyz(mgr ctrl.Manager, caches []cache.Cache, lease *Lease, hb *Heartbeat) error {
	for name, check := range map[string]healthz.Checker{
		"caches": health.CachesSynced(caches...), "lease": lease.Ready, "backend": hb.Ready,
	} {
		if err := mgr.AddReadyzCheck(name, check); err != nil {
			return err
		}
	}
	return nil
}

// newLease builds the agent's lease keeper.
func newLease(mgr ctrl.Manager, opts Options) *Lease {
	if opts.LeaseDuration == 0 {
		opts.LeaseDuration = DefaultLeaseDuration
	}
	if opts.LeaseRenewInterval == 0 {
		// Four renewals per lease: three may be lost before it runs out.
		opts.LeaseRenewInterval = min(DefaultLeaseRenewInterval, opts.LeaseDuration/4)
	}
	reader := mgr.GetAPIReader()
	l := &Lease{Hub: mgr.GetClient(), Reader: reader, Namespace: opts.Namespace, Target: opts.Target,
		Duration: opts.LeaseDuration, RenewInterval: opts.LeaseRenewInterval, FenceAfter: opts.FenceAfter, Clock: opts.Clock,
		Elected: mgr.Elected(), Recorder: mgr.GetEventRecorderFor("trainyard-agent"), Record: opts.FenceRecord,
		Policy: func(ctx context.Context) (v1alpha1.LeaseLossPolicy, error) {
			// A Target being deleted or gone has its jobs requeued.
			var t v1alpha1.Target
			err := reader.Get(ctx, client.ObjectKey{Name: opts.Target}, &t)
			if apierrors.IsNotFound(err) || (err == nil && !t.DeletionTimestamp.IsZero()) {
				return v1alpha1.LeaseLossRequeue, nil
			}
			return t.Spec.LeaseLoss, err
		}}
	l.Lister, _ = opts.Backend.(backends.RemoteLister)
	l.Stop, _ = opts.Backend.(backends.StopBound)
	return l
}

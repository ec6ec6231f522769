package dispatch

import (
	"context"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/source"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/admissioncheck"
	"github.com/trainyard-dev/trainyard/hub/dispatch/inflight"
	"github.com/trainyard-dev/trainyard/hub/eligibility"
	"github.com/trainyard-dev/trainyard/internal/metrics"
)

// Defaults of Options.
const (
	DefaultConcurrency = 8
	// DefaultRetryAfter paces re-checks while a Dispatch waits for its agent.
	DefaultRetryAfter = 5 * time.Second
	// eligibilityCacheSize bounds the remembered eligibility answers
	// (one per job and target).
	eligibilityCacheSize = 16384
)

// Options tune the controller.
type Options struct {
	Concurrency int
	RetryAfter  time.Duration
}

// Event reasons of the dispatch controller.
const (
	EventDispatched = "Dispatched"
	EventNoTarget   = "NoTarget"
	EventRejected   = "Rejected"
	EventRequeued   = "Requeued"
)

// Reconciler is the hub dispatch controller. Workloads are its objects;
// Dispatches and Targets only wake it.
type Reconciler struct {
	client client.Client
	// live reads the API server directly, for the one check a stale cache
	// must not answer: whether an attempt is already under way.
	live     client.Reader
	recorder record.EventRecorder
	clock    clock.Clock
	opts     Options
	latency  *latencyTracker
	// progress paces the relay of each job's progress reports.
	progress *progressPacer
	// flight is what is in flight to each target, kept by the Dispatch
	// watch, and the Workloads waiting for room.
	flight *inflight.Record
	// wakeups carries Workloads a pass wakes (room it gave back) to the
	// controller's queue.
	wakeups chan event.GenericEvent
	// eligibility remembers which targets could ever run which job.
	eligibility *eligibility.Cache
}

// NewReconciler returns a Reconciler with defaults filled in.
func NewReconciler(c client.Client, live client.Reader, recorder record.EventRecorder, clk clock.Clock, opts Options) *Reconciler {
	if opts.Concurrency == 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.RetryAfter == 0 {
		opts.RetryAfter = DefaultRetryAfter
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	r := &Reconciler{client: c, live: live, recorder: recorder, clock: clk, opts: opts, latency: newLatencyTracker(), progress: newProgressPacer(), flight: inflight.New(clk.Now),
		wakeups:     make(chan event.GenericEvent, wakeupBuffer),
		eligibility: eligibility.NewCache(eligibilityCacheSize)}
	return r
}

// state is what one pass learns before it acts.
type state struct {
	wl         *kueue.Workload
	check      kueue.AdmissionCheckReference
	checkState kueue.CheckState
	// checkless: Kueue admitted the Workload and no check of trainyard's
	// applies to it. Either the ClusterQueue lists trainyard's check but
	// admitted the job with no flavor (Kueue binds checks to flavors), or
	// trainyard dispatched it before and its check has since gone (removed
	// from the ClusterQueue, or its AdmissionCheck object deleted). Nothing
	// else would run it: trainyard places it all the same, lets what runs
	// run, and reports on the TrainJob.
	checkless  bool
	dispatches []v1alpha1.Dispatch
	live       *v1alpha1.Dispatch // the current attempt, if it exists and is not being deleted
}

// Reconcile runs one Workload through the phases in order.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	s, err := r.load(ctx, req.NamespacedName)
	if err != nil {
		return ctrl.Result{}, err
	}
	if s == nil {
		r.flight.StopWaiting(req.NamespacedName)
		r.latency.forget(req.NamespacedName)
		r.progress.forget(req.NamespacedName)
		metrics.ForgetProgress(req.NamespacedName.String())
		return ctrl.Result{}, nil
	}
	res, err := r.sync(ctx, s)
	noteProgress(req.NamespacedName, s, r.mustTearDown(s))
	if err != nil {
		metrics.SyncError(syncComponent)
	}
	return res, err
}

func (r *Reconciler) sync(ctx context.Context, s *state) (ctrl.Result, error) {
	if r.mustTearDown(s) {
		return r.tearDown(ctx, s)
	}
	if s.live == nil {
		switch s.checkState {
		case kueue.CheckStatePending:
			return r.startAttempt(ctx, s)
		case kueue.CheckStateReady:
			return r.attemptLost(ctx, s)
		}
		return ctrl.Result{}, nil
	}
	// One read of the Target for both verdicts: its status lists every
	// node of the target, and each read from the cache is a deep copy.
	t, err := readTarget(ctx, r.client, s.live)
	if err != nil {
		return ctrl.Result{}, err
	}
	// Finished work's outcome stands: a target lost after its job ended
	// never runs it again. Only work the agent stopped is requeued.
	if finished := s.live.Status.Phase.IsFinal() && s.live.Status.Reason != v1alpha1.ReasonAgentFenced; !finished {
		if lost, why := lostOn(t, s.live); lost {
			return ctrl.Result{}, r.requeue(ctx, s, why)
		}
	}
	if draining, why := targetDraining(t); draining {
		return ctrl.Result{}, r.requeue(ctx, s, why)
	}
	if err := r.syncCheckState(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	progressDue, err := r.mirrorToTrainJob(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	if s.live.Status.Phase == "" || s.live.Status.Phase == v1alpha1.DispatchPending {
		return ctrl.Result{RequeueAfter: r.opts.RetryAfter}, nil
	}
	// A progress report held back by the pacing is written when due.
	return ctrl.Result{RequeueAfter: progressDue}, nil
}

// load fetches the Workload, finds trainyard's check on it and its Dispatches.
// It returns nil when trainyard has nothing to do with the Workload.
func (r *Reconciler) load(ctx context.Context, key types.NamespacedName) (*state, error) {
	var wl kueue.Workload
	if err := r.client.Get(ctx, key, &wl); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	checks, err := admissioncheck.ChecksOf(ctx, r.client, &wl)
	if err != nil {
		return nil, err
	}
	s := &state{wl: &wl}
	if len(checks) > 0 {
		s.check = checks[0]
		for _, c := range wl.Status.AdmissionChecks {
			if c.Name == s.check {
				s.checkState = c.State
			}
		}
	} else if s.checkless, err = admissioncheck.FlavorlessInOurQueue(ctx, r.client, &wl); err != nil {
		return nil, err
	} else if !s.checkless && hasFinalizer(&wl) && apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted) {
		// trainyard's check went while Kueue kept the job admitted: only
		// an eviction, deactivation or deletion ends its work.
		s.checkless = true
	}
	if len(checks) == 0 && !s.checkless && !hasFinalizer(&wl) {
		return nil, nil
	}
	var list v1alpha1.DispatchList
	if err := r.client.List(ctx, &list, client.MatchingFields{IndexWorkloadUID: string(wl.UID)}); err != nil {
		return nil, err
	}
	s.dispatches = list.Items
	attempt := currentAttempt(&wl)
	for i := range s.dispatches {
		d := &s.dispatches[i]
		if d.Spec.Attempt == attempt && d.DeletionTimestamp.IsZero() {
			s.live = d
		}
	}
	if s.checkless {
		// No check to hold the job back: once a Dispatch exists, its
		// outcome is the TrainJob's, as with a check that is Ready.
		s.checkState = kueue.CheckStatePending
		if s.live != nil {
			s.checkState = kueue.CheckStateReady
		}
	}
	return s, nil
}

// owningTrainJob returns the TrainJob that owns wl, or nil.
func (r *Reconciler) owningTrainJob(ctx context.Context, wl *kueue.Workload) (*trainer.TrainJob, error) {
	for _, o := range wl.OwnerReferences {
		if o.Kind == trainer.TrainJobKind && o.APIVersion == trainer.GroupVersion.String() {
			var tj trainer.TrainJob
			if err := r.client.Get(ctx, client.ObjectKey{Namespace: wl.Namespace, Name: o.Name}, &tj); err != nil {
				return nil, client.IgnoreNotFound(err)
			}
			if tj.UID != o.UID {
				return nil, nil
			}
			return &tj, nil
		}
	}
	return nil, nil
}

// SetupWithManager registers the controller: Workloads are reconciled;
// Dispatch changes keep the in-flight record and wake their Workload, and
// Target changes wake only the Workloads they can affect (watch.go).
// A second controller drains Targets being deleted (targetDrainer).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	metrics.DeclareSyncErrors(syncComponent)
	if err := IndexDispatches(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	if err := (&targetDrainer{client: r.client, live: r.live}).setup(mgr); err != nil {
		return err
	}
	// The in-flight gauges read this controller's record, not the cache.
	if err := mgr.Add(&metrics.HubFlight{Counts: r.flight.Counts}); err != nil {
		return err
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		return r.sweepWaiting(ctx, waitSweepInterval)
	})); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).Named("trainyard-dispatch").
		For(&kueue.Workload{}, builder.WithPredicates(ignoreOwnAttemptWrites())).
		Watches(&v1alpha1.Dispatch{}, r.dispatchHandler()).
		Watches(&v1alpha1.Target{}, r.targetHandler()).
		WatchesRawSource(source.Channel(r.wakeups, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.opts.Concurrency}).
		Complete(r)
}

// syncComponent names this controller's failed syncs
// (trainyard_sync_errors_total), declared at start and counted on failure.
const syncComponent = "hub-dispatch"

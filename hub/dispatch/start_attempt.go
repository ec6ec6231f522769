package dispatch

import (
	"context"
	"errors"
	"strconv"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/placement"
	"github.com/trainyard-dev/trainyard/hub/snapshot"
	"github.com/trainyard-dev/trainyard/internal/metrics"
)

// startAttempt snapshots the runtime, places the job and writes the next
// attempt's Dispatch. The attempt number is persisted on the Workload
// before the Dispatch is created, so a crash in between only skips a number
// and never reuses one.
func (r *Reconciler) startAttempt(ctx context.Context, s *state) (ctrl.Result, error) {
	wl := s.wl
	if r.attemptUnderWay(s) {
		return r.waitForEarlierAttempts(ctx, s)
	}
	if r.stillWaiting(s) {
		// Nothing freed room since the last try; a wake-up will say so.
		return ctrl.Result{}, nil
	}
	tj, err := r.owningTrainJob(ctx, wl)
	if err != nil {
		return ctrl.Result{}, err
	}
	if tj == nil {
		return ctrl.Result{}, r.reject(ctx, s, "", "trainyard dispatches TrainJobs only; this Workload has no TrainJob owner")
	}
	// A job whose runtime was not pinned at creation is rejected, not kept
	// waiting: it can never become pinned (runtimeRef is immutable and the
	// pin annotations are set only at creation), so waiting would hold the
	// quota Kueue reserved for a job that can never run. Rejecting frees the
	// quota and fails the TrainJob with the message telling the user to
	// create it again with the queue label (snapshot.ErrNotPinned).
	rt, err := snapshot.Take(ctx, r.client, tj)
	if errors.Is(err, snapshot.ErrNotPinned) || errors.Is(err, snapshot.ErrRuntimeNotFound) ||
		errors.Is(err, snapshot.ErrUnsupportedRuntime) || errors.Is(err, snapshot.ErrSnapshotMismatch) {
		return ctrl.Result{}, r.reject(ctx, s, "", "cannot snapshot the runtime: "+err.Error())
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	req := requestOf(wl)
	if req.QueueFlavors, err = r.queueFlavors(ctx, wl); err != nil {
		return ctrl.Result{}, err
	}
	// Whether each target could ever run the job does not change while
	// placement runs: it is asked before choosing.
	ineligible, err := r.ineligibleTargets(ctx, wl, tj, rt, req)
	if err != nil {
		return ctrl.Result{}, err
	}
	start := time.Now()
	attempt := nextAttemptNumber(s)
	b, err := r.chooseAndBook(ctx, wl, req, ineligible, dispatchName(wl, attempt))
	if err != nil {
		metrics.ObserveDecision("", start)
		var noPlace placementError
		if errors.As(err, &noPlace) {
			return r.noPlacement(ctx, s, noPlace.err)
		}
		return ctrl.Result{}, err
	}
	d, err := r.write(ctx, s, tj, rt, req, b, attempt)
	metrics.ObserveDecision(b.decision.Target, start)
	if err != nil {
		if apierrors.IsInvalid(err) {
			// The API server will refuse the same Dispatch on every pass:
			// say so and release the quota rather than loop.
			return ctrl.Result{}, r.reject(ctx, s, "", "cannot record the Dispatch: "+err.Error())
		}
		return ctrl.Result{}, err
	}
	decision := b.decision
	metrics.Dispatched(decision.Target, metrics.ResultDispatched)
	// The check keeps what it says until the agent answers (answerDue).
	r.recorder.Eventf(wl, corev1.EventTypeNormal, EventDispatched, "Dispatched to target %s as %s/%s (attempt %d)",
		decision.Target, d.Namespace, d.Name, attempt)
	return ctrl.Result{RequeueAfter: r.opts.RetryAfter}, nil
}

// attemptUnderWay reports whether the Workload has a Dispatch, as the
// cache shows it or as this hub booked it and the watch has not shown it
// yet: a pass right after the one that wrote it must not start a second
// attempt. A Dispatch being deleted counts too: its agent holds it until
// the remote work is gone (a lost target's is let go by the hub: letGo),
// so the next attempt never runs beside it.
func (r *Reconciler) attemptUnderWay(s *state) bool {
	return len(s.dispatches) > 0 || r.flight.Booked(s.wl.UID)
}

// liveAttemptExists asks the API server, not the cache, whether a Dispatch
// of wl that is not being deleted exists.
func (r *Reconciler) liveAttemptExists(ctx context.Context, wl *kueue.Workload) (bool, error) {
	if r.live == nil {
		return false, nil
	}
	var list v1alpha1.DispatchList
	if err := r.live.List(ctx, &list, client.MatchingLabels{v1alpha1.LabelWorkloadUID: string(wl.UID)}); err != nil {
		return false, err
	}
	for _, d := range list.Items {
		if d.DeletionTimestamp.IsZero() {
			return true, nil
		}
	}
	return false, nil
}

// write records a booked decision outside any lock: the Target's
// finalizer, the Workload's with the attempt number, then the Dispatch. When a
// step fails the booking is given back, unless the Dispatch may have been
// stored (the watch then settles it, or the booking times out).
func (r *Reconciler) write(ctx context.Context, s *state, tj *trainer.TrainJob, rt *v1alpha1.RuntimeSnapshot,
	req placement.Request, b booking, attempt int32) (*v1alpha1.Dispatch, error) {
	d, stored, err := r.writeSteps(ctx, s, tj, rt, req, b, attempt)
	if err != nil && !stored {
		r.wakeUp(ctx, r.flight.Unbook(b.key, b.target.Name))
	}
	return d, err
}

// writeSteps reports, on failure, whether the Dispatch may have been stored.
func (r *Reconciler) writeSteps(ctx context.Context, s *state, tj *trainer.TrainJob, rt *v1alpha1.RuntimeSnapshot,
	req placement.Request, b booking, attempt int32) (*v1alpha1.Dispatch, bool, error) {
	if err := r.holdTarget(ctx, b.target.Name); err != nil {
		return nil, false, err
	}
	if err := r.nextAttempt(ctx, s, attempt); err != nil {
		return nil, false, err
	}
	tjSnap, err := snapshot.TrainJob(tj, rt)
	if err != nil {
		return nil, false, err
	}
	d := buildDispatch(b.target, s.wl, tjSnap, rt, req, b.decision, attempt)
	if err := r.client.Create(ctx, d); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, !refused(err), r.releaseAttempt(ctx, s.wl, attempt, err)
	}
	return d, true, nil
}

func currentAttempt(wl *kueue.Workload) int32 {
	n, _ := strconv.Atoi(wl.Annotations[v1alpha1.AnnotationAttempt])
	return int32(n)
}

// nextAttemptNumber is past every attempt of the Workload ever seen.
func nextAttemptNumber(s *state) int32 {
	next := currentAttempt(s.wl) + 1
	for _, d := range s.dispatches {
		next = max(next, d.Spec.Attempt+1)
	}
	return next
}

// nextAttempt persists the attempt number on the Workload, with trainyard's
// finalizer if it lacks it, in one patch: the finalizer is on before any
// Dispatch of the Workload exists.
func (r *Reconciler) nextAttempt(ctx context.Context, s *state, next int32) error {
	// Optimistic lock: two hub replicas racing here must not both win, and
	// the finalizer list is replaced whole.
	patch := client.MergeFromWithOptions(s.wl.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if s.wl.Annotations == nil {
		s.wl.Annotations = map[string]string{}
	}
	s.wl.Annotations[v1alpha1.AnnotationAttempt] = strconv.Itoa(int(next))
	controllerutil.AddFinalizer(s.wl, v1alpha1.WorkloadFinalizer)
	return r.client.Patch(ctx, s.wl, patch)
}

func hasFinalizer(wl *kueue.Workload) bool {
	return controllerutil.ContainsFinalizer(wl, v1alpha1.WorkloadFinalizer)
}

// releaseAttempt gives attempt back after the API server refused to create
// its Dispatch, so that the next pass reuses the number instead of burning
// one per failure. Only a refusal that proves nothing was stored qualifies
// (a timeout may have stored the Dispatch, and then the number stays
// taken). The patch is optimistic: if the Workload changed since, another
// replica may have taken a later attempt, and the number stays taken.
// It returns createErr, so the pass fails and is retried with backoff.
func (r *Reconciler) releaseAttempt(ctx context.Context, wl *kueue.Workload, attempt int32, createErr error) error {
	if !refused(createErr) || currentAttempt(wl) != attempt {
		return createErr
	}
	patch := client.MergeFromWithOptions(wl.DeepCopy(), client.MergeFromWithOptimisticLock{})
	wl.Annotations[v1alpha1.AnnotationAttempt] = strconv.Itoa(int(attempt - 1))
	if err := r.client.Patch(ctx, wl, patch); err != nil {
		ctrl.LoggerFrom(ctx).Info("could not give back an attempt number; it stays skipped", "attempt", attempt, "error", err)
	}
	return createErr
}

// refused reports whether err is an answer of the API server that means
// the object was not stored.
func refused(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err) ||
		apierrors.IsNotFound(err) || apierrors.IsUnauthorized(err) || apierrors.IsMethodNotSupported(err) ||
		apierrors.IsRequestEntityTooLargeError(err) || apierrors.IsTooManyRequests(err)
}

// lagRecheck paces a pass that found an attempt this hub booked or wrote
// but the cache does not show as the current one yet.
const lagRecheck = time.Second

// waitForEarlierAttempts is startAttempt's pass while an earlier attempt
// still exists (attemptUnderWay). One being deleted on a lost target is let
// go now; the others wait for their agent, and their going (the Dispatch
// watch) or their target's loss (the Target watch) wakes the Workload, so
// the pass only looks again after RetryAfter. A booking or a Dispatch not
// being deleted is the cache lagging what this hub just wrote: it shows
// shortly (or the booking times out).
func (r *Reconciler) waitForEarlierAttempts(ctx context.Context, s *state) (ctrl.Result, error) {
	lags := r.flight.Booked(s.wl.UID)
	for i := range s.dispatches {
		d := &s.dispatches[i]
		if d.DeletionTimestamp.IsZero() {
			lags = true
			continue
		}
		if err := letGo(ctx, r.client, d); err != nil {
			return ctrl.Result{}, err
		}
	}
	if lags {
		return ctrl.Result{RequeueAfter: lagRecheck}, nil
	}
	return ctrl.Result{RequeueAfter: r.opts.RetryAfter}, nil
}

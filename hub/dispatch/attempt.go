package dispatch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/dispatch/inflight"
	"github.com/trainyard-dev/trainyard/hub/placement"
	"github.com/trainyard-dev/trainyard/hub/snapshot"
	"github.com/trainyard-dev/trainyard/internal/metrics"
)

// Event reasons of the dispatch controller.
const (
	EventDispatched = "Dispatched"
	EventNoTarget   = "NoTarget"
	EventRejected   = "Rejected"
	EventRequeued   = "Requeued"
)

// checklessRetryAfter paces placement of a flavor-less job that fits nowhere yet.
const checklessRetryAfter = 15 * time.Second

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
	msg := fmt.Sprintf("dispatched to target %s (attempt %d), waiting for its agent", decision.Target, attempt)
	if decision.Queued {
		msg = fmt.Sprintf("dispatched to target %s (attempt %d) to wait in its own queue: no target had room now", decision.Target, attempt)
	}
	if err := r.setCheck(ctx, s, kueue.CheckStatePending, msg); err != nil {
		return ctrl.Result{}, err
	}
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

// placementError wraps a failure of placement itself, as opposed to an API
// error on the way.
type placementError struct{ err error }

func (e placementError) Error() string { return e.err.Error() }

// booking is a decision whose GPUs are booked in flight, not yet written.
type booking struct {
	decision placement.Decision
	target   *v1alpha1.Target
	key      string // the Dispatch's namespace/name
}

// chooseAndBook chooses a target and books the job's GPUs there. It is the
// only step under the in-flight lock (inflight.Record.Decide), and it is
// pure: Targets come from the cache, what is in flight from the watch, and
// no API call is made. A job that finds no room is recorded as waiting
// under the same lock.
func (r *Reconciler) chooseAndBook(ctx context.Context, wl *kueue.Workload, req placement.Request,
	ineligible map[string]string, name string) (booking, error) {
	var b booking
	err := r.flight.Decide(func(tx *inflight.Tx) error {
		var targets v1alpha1.TargetList
		if err := r.client.List(ctx, &targets); err != nil {
			return err
		}
		me := inflight.Place{Key: client.ObjectKeyFromObject(wl), Priority: ptr.Deref(wl.Spec.Priority, 0), Since: wl.CreationTimestamp.Time}
		candidates := make([]placement.Candidate, 0, len(targets.Items))
		for i := range targets.Items {
			t := &targets.Items[i]
			if !t.DeletionTimestamp.IsZero() {
				continue // being drained: nothing new goes there
			}
			candidates = append(candidates, tx.Candidate(t, me, ineligible[t.Name]))
		}
		decision, err := placement.Choose(req, candidates)
		switch {
		case errors.Is(err, placement.ErrNoTarget) || errors.Is(err, placement.ErrNoCapacity):
			judged := map[string]int64{}
			for i := range targets.Items {
				if t := &targets.Items[i]; ineligible[t.Name] != "" {
					judged[t.Name] = t.Generation
				}
			}
			tx.Wait(me, inflight.Need{GPUs: req.GPUs(), Flavors: req.Flavors, QueueFlavors: req.QueueFlavors, Ineligible: judged})
			return placementError{err}
		case errors.Is(err, placement.ErrNeverFits) || errors.Is(err, placement.ErrIneligible):
			return placementError{err}
		case err != nil:
			return err
		}
		for i := range targets.Items {
			if t := &targets.Items[i]; t.Name == decision.Target {
				b = booking{decision: decision, target: t, key: inflight.Key(t.Spec.Agent.Namespace, name)}
				tx.Book(inflight.Booking{Key: b.key, Target: t.Name, Workload: wl.UID, WorkloadKey: me.Key,
					GPUs: req.GPUs(), Nodes: decision.Reservations(), Queued: decision.Queued})
				return nil
			}
		}
		return fmt.Errorf("placement chose target %q, which is not a candidate", decision.Target)
	})
	return b, err
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

// WaitingPrefix begins the check message of a job waiting for room.
const WaitingPrefix = "waiting for room: "

// noPlacement turns a placement failure into the check state Kueue needs:
// Rejected when the job can never fit or no target could ever run it;
// Pending while the fleet is only full, with the quota held and the job
// woken when room frees (watch.go); Retry (requeue with backoff) when no
// target serves the flavor yet or only targets of other flavors could run
// the job, since Kueue may then admit it with another flavor.
func (r *Reconciler) noPlacement(ctx context.Context, s *state, err error) (ctrl.Result, error) {
	if errors.Is(err, placement.ErrNeverFits) || errors.Is(err, placement.ErrIneligible) {
		return ctrl.Result{}, r.reject(ctx, s, "", err.Error())
	}
	metrics.Dispatched("", metrics.ResultNoCapacity)
	if waitsForRoom(err) && !s.checkless {
		return ctrl.Result{}, r.waitForRoom(ctx, s, err)
	}
	if !s.checkless {
		// Kueue requeues it: its next pass must try, not wait for room.
		r.flight.StopWaiting(client.ObjectKeyFromObject(s.wl))
	}
	if e := r.setCheck(ctx, s, kueue.CheckStateRetry, err.Error()); e != nil {
		return ctrl.Result{}, e
	}
	r.recorder.Event(s.wl, corev1.EventTypeWarning, EventNoTarget, err.Error())
	if s.checkless {
		// No check to ask Kueue for a retry: look again later; a Target
		// change wakes the Workload sooner.
		return ctrl.Result{RequeueAfter: checklessRetryAfter}, nil
	}
	return ctrl.Result{}, nil
}

// stillWaiting reports whether the Workload waits for room, says so on its
// check, and no wake-up has offered it room since its last try: a pass on
// any other event (Kueue's own writes, a resync) would only fail again.
// A check Kueue reset, or a checkless job, tries again.
func (r *Reconciler) stillWaiting(s *state) bool {
	if s.checkless || !r.flight.Asleep(client.ObjectKeyFromObject(s.wl)) {
		return false
	}
	for _, c := range s.wl.Status.AdmissionChecks {
		if c.Name == s.check {
			return c.State == kueue.CheckStatePending && strings.HasPrefix(c.Message, WaitingPrefix)
		}
	}
	return false
}

// waitsForRoom reports whether a placement failure only needs room to free
// on a target that serves the job's flavor.
func waitsForRoom(err error) bool {
	return errors.Is(err, placement.ErrNoCapacity) && !errors.Is(err, placement.ErrOtherFlavors)
}

// waitForRoom keeps the check Pending while the job waits for room. The
// check message is written once, when the job starts to wait: the reasons
// are those of its first try, and later tries write nothing, so thousands
// of waiting jobs cost no writes while room frees one job at a time.
func (r *Reconciler) waitForRoom(ctx context.Context, s *state, err error) error {
	for _, c := range s.wl.Status.AdmissionChecks {
		if c.Name == s.check && c.State == kueue.CheckStatePending && strings.HasPrefix(c.Message, WaitingPrefix) {
			return nil
		}
	}
	if e := r.setCheck(ctx, s, kueue.CheckStatePending, WaitingPrefix+err.Error()); e != nil {
		return e
	}
	r.recorder.Event(s.wl, corev1.EventTypeNormal, EventNoTarget, err.Error())
	return nil
}

// requestOf reads the pod sets, their GPU requests and assigned flavors.
func requestOf(wl *kueue.Workload) placement.Request {
	var req placement.Request
	flavors := map[string]bool{}
	counts := map[kueue.PodSetReference]int32{}
	if wl.Status.Admission != nil {
		for _, a := range wl.Status.Admission.PodSetAssignments {
			for _, f := range a.Flavors {
				flavors[string(f)] = true
			}
			if a.Count != nil {
				counts[a.Name] = *a.Count
			}
		}
	}
	for _, ps := range wl.Spec.PodSets {
		count := ps.Count
		if c, ok := counts[ps.Name]; ok {
			count = c
		}
		required, preferred := placement.PodSetTopology(ps.Template.Annotations)
		if tr := ps.TopologyRequest; tr != nil {
			if tr.Required != nil {
				required = *tr.Required
			}
			if tr.Preferred != nil {
				preferred = *tr.Preferred
			}
		}
		req.PodSets = append(req.PodSets, placement.PodSet{Name: string(ps.Name), Count: count,
			GPUsPerPod: podGPUs(&ps.Template.Spec), Required: required, Preferred: preferred})
	}
	for f := range flavors {
		req.Flavors = append(req.Flavors, f)
	}
	sort.Strings(req.Flavors)
	return req
}

func podGPUs(spec *corev1.PodSpec) int64 {
	var n int64
	for _, c := range spec.Containers {
		if q, ok := c.Resources.Requests[v1alpha1.GPUResource]; ok {
			n += q.Value()
		} else if q, ok := c.Resources.Limits[v1alpha1.GPUResource]; ok {
			n += q.Value()
		}
	}
	return n
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

// buildDispatch is the Dispatch of one attempt on target t.
func buildDispatch(t *v1alpha1.Target, wl *kueue.Workload, tjSnap *v1alpha1.TrainJobSnapshot,
	rt *v1alpha1.RuntimeSnapshot, req placement.Request, decision placement.Decision, attempt int32) *v1alpha1.Dispatch {
	targetName := t.Name
	d := &v1alpha1.Dispatch{
		ObjectMeta: metav1.ObjectMeta{
			Name:      dispatchName(wl, attempt),
			Namespace: t.Spec.Agent.Namespace,
			Labels: map[string]string{
				v1alpha1.LabelWorkloadUID:       string(wl.UID),
				v1alpha1.LabelWorkloadNamespace: v1alpha1.LabelValue(wl.Namespace),
				v1alpha1.LabelWorkloadName:      v1alpha1.LabelValue(wl.Name),
				v1alpha1.LabelTarget:            v1alpha1.LabelValue(targetName),
				v1alpha1.LabelAttempt:           strconv.Itoa(int(attempt)),
			},
			Annotations: map[string]string{v1alpha1.AnnotationGPUs: strconv.FormatInt(req.GPUs(), 10)},
			// The agent's finalizer is on from the start, so the agent need
			// not patch it on (a hub write per job saved) and no remote
			// work can exist without it. The agent removes it once its work
			// is gone; the hub, when the target is lost (letGo).
			Finalizers: []string{v1alpha1.RemoteCleanupFinalizer},
		},
		Spec: v1alpha1.DispatchSpec{
			Workload:   v1alpha1.WorkloadReference{Namespace: wl.Namespace, Name: wl.Name, UID: wl.UID},
			TargetName: targetName,
			Attempt:    attempt,
			Runtime:    *rt,
			TrainJob:   *tjSnap,
		},
	}
	flavors := map[kueue.PodSetReference]map[string]string{}
	if wl.Status.Admission != nil {
		for _, a := range wl.Status.Admission.PodSetAssignments {
			m := map[string]string{}
			for res, f := range a.Flavors {
				m[string(res)] = string(f)
			}
			flavors[a.Name] = m
		}
	}
	for _, ps := range req.PodSets {
		d.Spec.PodSets = append(d.Spec.PodSets, v1alpha1.PodSetPlacement{
			Name: ps.Name, Count: ps.Count, GPUsPerPod: ps.GPUsPerPod, Flavors: flavors[kueue.PodSetReference(ps.Name)],
		})
	}
	// Only pod sets with a topology request are pinned to their domain;
	// the others may land anywhere on the target, as the remote scheduler
	// sees fit.
	constrained := decision
	constrained.PodSets = nil
	for _, a := range decision.PodSets {
		if a.Level != "" {
			constrained.PodSets = append(constrained.PodSets, a)
		}
	}
	constrained.Apply(d.Spec.PodSets)
	if decision.Queued {
		d.Annotations[v1alpha1.AnnotationQueued] = "true"
	}
	return d
}

// dispatchName is unique across the hub for one Workload attempt: Workloads
// of different namespaces share an agent namespace. It is a DNS label of at
// most 63 characters, so that remote work can carry it as a label value
// (backends.RemoteLabels) and the agent can map that work back to it; the
// Workload name in front is shortened to fit.
func dispatchName(wl *kueue.Workload, attempt int32) string {
	sum := sha256.Sum256([]byte(wl.UID))
	suffix := fmt.Sprintf("-%s-a%d", hex.EncodeToString(sum[:])[:8], attempt)
	prefix := strings.ReplaceAll(wl.Name, ".", "-")
	if max := validation.DNS1123LabelMaxLength - len(suffix); len(prefix) > max {
		prefix = prefix[:max]
	}
	prefix = strings.TrimRight(prefix, "-")
	if prefix == "" {
		prefix = "workload"
	}
	return prefix + suffix
}

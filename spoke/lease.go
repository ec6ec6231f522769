package spoke

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/internal/metrics"
)

// Lease defaults; the hub's --agent-lease-duration must equal the agent's
// --lease-duration and its --agent-fence-after the agent's --fence-after
// (the hub takes the longer of its own and the one the agent advertises in
// the Lease).
const (
	DefaultLeaseDuration      = 40 * time.Second
	DefaultLeaseRenewInterval = 10 * time.Second
	// DefaultFenceAfter is longer than the hub control-plane outages and
	// upgrades an operator lives through (10 minutes, with room to spare):
	// a hub that is down stops nothing.
	DefaultFenceAfter = 15 * time.Minute
	// EventSelfFenced is recorded on the agent's Lease when it stopped its
	// remote work for want of a lease.
	EventSelfFenced = "SelfFenced"
)

// Lease is the agent's right to start remote work: a coordination.k8s.io
// Lease in its agent namespace on the hub, renewed every RenewInterval by
// the elected replica. Every replica keeps evidence, on its own clock, that
// the hub sees the lease renewed: the send time of its own last successful
// renewal, or, when another replica renews, the send time of the last read
// that still showed the previous version (the renewal happened after it).
//
// Without evidence younger than Duration the agent starts no new work;
// running work runs on, as kubelets keep their pods when they lose the API
// server. Only where the hub would requeue the work (the Lease last
// written says leaseLoss Requeue) and only after FenceAfter without
// evidence does it stop the work that has not finished (the hub requeues
// after FenceAfter plus the advertised stop bound plus a grace), remember
// what it stopped, and report it on the Dispatches (reason AgentFenced)
// once it holds the lease again.
type Lease struct {
	// Hub writes the Lease; Reader reads it uncached.
	Hub           client.Client
	Reader        client.Reader
	Namespace     string
	Target        string
	Duration      time.Duration
	RenewInterval time.Duration
	// FenceAfter is how long a Requeue target's agent goes without
	// evidence before it stops its running work (DefaultFenceAfter).
	FenceAfter time.Duration
	// Policy reads the Target's spec.leaseLoss from the hub before each
	// renewal; the Lease then says it (nil: Requeue).
	Policy func(context.Context) (v1alpha1.LeaseLossPolicy, error)
	// Stop bounds how long stopped work's processes live on (nil: 0).
	Stop  backends.StopBound
	Clock clock.Clock
	// Lister stops remote work; nil: the backend cannot list its work, and
	// the agent cannot fence itself (logged at start).
	Lister backends.RemoteLister
	// Elected is closed once this replica leads (nil: at once).
	Elected  <-chan struct{}
	Recorder record.EventRecorder
	// Wake receives a Dispatch to reconcile when a fenced one can be reported.
	Wake chan<- event.GenericEvent

	identity string
	mu       sync.Mutex
	evidence time.Time
	held     bool
	// reached: a renewal (elected) or a read (standby) of the Lease has
	// succeeded since start.
	reached bool
	// seenVersion and seenSent: the last Lease version read, and when the
	// read that showed it was sent.
	seenVersion string
	seenSent    time.Time
	// fenced holds the attempts whose work the watchdog stopped, true once
	// its delete was issued.
	fenced map[fencedKey]bool
	// Record shares the stops with the other replicas (nil: none).
	Record *FenceRecord
	// mayRequeue: the hub may requeue this target's jobs when the lease
	// runs out. Set before a Lease saying Requeue is written (a write that
	// timed out may have landed), cleared only once one saying Hold was
	// written; a standby takes it from the Lease it reads.
	mayRequeue bool
	// lapsed is the latest moment this replica knew some replica of the
	// target may have stopped work the hub has not heard of, whose memory
	// of what it stopped is not this replica's: at its first renewal of a
	// Lease that had lapsed (the previous holder, this process before a
	// restart or another replica, may have fenced), and while its own
	// evidence is near the fence deadline (a standby, whose evidence trails
	// the leader's by up to a read interval, fences first).
	lapsed      time.Time
	renewedOnce bool
	// prunedAt is when fenced was last pruned (prune).
	prunedAt time.Time
}

// fencedPruneInterval is how often a replica drops the fenced attempts
// that no longer need a report (prune).
const fencedPruneInterval = time.Minute

// fencedKey names the attempt of a Dispatch whose remote work was stopped.
type fencedKey struct {
	namespace, name string
	attempt         int32
}

// Start runs until ctx ends; it is a manager Runnable that runs on every
// replica, elected or not, so that a replica that lost its leader election
// while cut off still stops the work.
func (l *Lease) Start(ctx context.Context) error {
	metrics.DeclareSyncErrors(leaseComponent)
	l.init()
	if l.Lister == nil {
		log.FromContext(ctx).Info("the backend cannot list its remote work: this agent cannot stop it when its lease runs out")
	}
	go l.renewLoop(ctx)
	t := time.NewTicker(l.tick())
	defer t.Stop()
	lastFence := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		l.markLapse()
		if l.check() {
			l.prune(ctx)
			continue
		}
		if l.Lister == nil || !l.mustFence() || l.Clock.Since(lastFence) < l.RenewInterval {
			continue
		}
		lastFence = l.Clock.Now()
		if err := l.fence(ctx); err != nil {
			metrics.SyncError(leaseComponent)
			log.FromContext(ctx).Error(err, "stopping remote work without a lease")
		}
	}
}

// NeedLeaderElection: no, see Start.
func (l *Lease) NeedLeaderElection() bool { return false }

func (l *Lease) init() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.identity != "" {
		return
	}
	host, _ := os.Hostname()
	l.identity = host + "_" + rand.String(6)
	// A process starts without a lease: whatever it or its predecessor
	// renewed last was before this moment.
	l.evidence = l.Clock.Now()
	l.held = true
	if l.fenced == nil {
		l.fenced = map[fencedKey]bool{}
	}
	if l.FenceAfter == 0 {
		l.FenceAfter = DefaultFenceAfter
	}
	// Until the first renewal says otherwise, assume the hub may requeue:
	// the Lease a predecessor wrote may say Requeue.
	l.mayRequeue = true
}

// mustFence: the hub may requeue this target's work and there has been no
// evidence of a renewal for FenceAfter.
func (l *Lease) mustFence() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mayRequeue && l.Clock.Since(l.evidence) >= l.FenceAfter
}

// markLapse records that another replica may be stopping work now: the
// hub may requeue and this replica's evidence is within two read intervals
// of the fence deadline.
func (l *Lease) markLapse() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.Clock.Now()
	if l.mayRequeue && now.Sub(l.evidence) >= l.FenceAfter-2*l.RenewInterval {
		l.lapsed = now
	}
}

// tick is how often the watchdog looks: often enough to stop work within a
// second of the lease running out.
func (l *Lease) tick() time.Duration { return min(time.Second, l.RenewInterval) }

// Held reports whether this replica has evidence younger than Duration
// that the hub sees the lease renewed. Remote work is created only then.
func (l *Lease) Held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.Clock.Since(l.evidence) < l.Duration
}

// Ready is the lease's readiness check: this replica has renewed its Lease
// (elected) or read it (standby) since it started, and holds it.
func (l *Lease) Ready(*http.Request) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case !l.reached:
		return errors.New("the agent has neither renewed nor read its lease on the hub since it started")
	case l.Clock.Since(l.evidence) >= l.Duration:
		return fmt.Errorf("no renewal of the lease on the hub seen for %s: no new remote work is started", l.Duration)
	}
	return nil
}

// check updates the held state and returns it; on regaining the lease it
// wakes the Dispatches whose work was stopped, so they are reported.
func (l *Lease) check() bool {
	l.mu.Lock()
	now := l.Clock.Since(l.evidence) < l.Duration
	regained := now && !l.held
	l.held = now
	var wake []fencedKey
	if regained {
		for k := range l.fenced {
			wake = append(wake, k)
		}
	}
	l.mu.Unlock()
	for _, k := range wake {
		select { // a full queue is fine: fenced Dispatches are resynced
		case l.Wake <- event.GenericEvent{Object: &v1alpha1.Dispatch{ObjectMeta: metav1.ObjectMeta{Namespace: k.namespace, Name: k.name}}}:
		default:
		}
	}
	return now
}

// renewLoop renews (elected) or watches (standby) the Lease.
func (l *Lease) renewLoop(ctx context.Context) {
	elected := l.Elected
	for {
		leading := false
		if elected == nil {
			leading = true
		} else {
			select {
			case <-elected:
				leading = true
			default:
			}
		}
		var err error
		if leading {
			err = l.renew(ctx)
		} else {
			err = l.watch(ctx)
		}
		if err != nil && ctx.Err() == nil {
			log.FromContext(ctx).V(1).Info("lease renewal failed", "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(l.RenewInterval):
		case <-elected:
			elected = nil // lead from now on; renew at once
		}
	}
}

// call bounds one API call, so a hung connection costs one interval.
func (l *Lease) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, min(l.RenewInterval, l.Duration/2))
}

// renew writes the Lease, saying the leaseLoss policy the agent now
// enforces; on success the send time is evidence.
func (l *Lease) renew(ctx context.Context) error {
	sent := l.Clock.Now()
	ctx, cancel := l.call(ctx)
	defer cancel()
	policy, err := l.policy(ctx)
	if err != nil {
		return err
	}
	var lease coordinationv1.Lease
	err = l.Reader.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: v1alpha1.LeaseName(l.Target)}, &lease)
	if (err == nil || apierrors.IsNotFound(err)) && policy == v1alpha1.LeaseLossRequeue {
		// From before the write: one that times out may still land.
		l.mu.Lock()
		l.mayRequeue = true
		l.mu.Unlock()
	}
	switch {
	case apierrors.IsNotFound(err):
		lease = coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: v1alpha1.LeaseName(l.Target)}}
		l.fill(&lease, sent, policy)
		err = l.Hub.Create(ctx, &lease)
	case err == nil:
		lapsed := lapsedAt(&lease, sent)
		l.fill(&lease, sent, policy)
		if err = l.Hub.Update(ctx, &lease); err == nil {
			l.mu.Lock()
			if !l.renewedOnce && lapsed && sent.After(l.lapsed) {
				l.lapsed = sent
			}
			l.mu.Unlock()
		}
	}
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.renewedOnce = true
	if policy == v1alpha1.LeaseLossHold {
		l.mayRequeue = false
	}
	if sent.After(l.evidence) {
		l.evidence = sent
	}
	l.seenVersion, l.seenSent = lease.ResourceVersion, sent
	l.reached = true
	l.mu.Unlock()
	return nil
}

// policy is the Target's leaseLoss as the hub has it now.
func (l *Lease) policy(ctx context.Context) (v1alpha1.LeaseLossPolicy, error) {
	if l.Policy == nil {
		return v1alpha1.LeaseLossRequeue, nil
	}
	p, err := l.Policy(ctx)
	if err != nil {
		return "", fmt.Errorf("read the target's leaseLoss: %w", err)
	}
	if p == "" {
		p = v1alpha1.LeaseLossRequeue
	}
	return p, nil
}

// lapsedAt reports whether lease, as its last holder left it, went
// without a renewal long enough for that holder to stop its work: its
// fence deadline passed on a target whose jobs the hub may requeue. The
// holder's renewTime is its own clock; agent replicas of one target run
// beside each other, so it is close enough to ours, and a wrong answer
// only turns a lost job into a requeued one.
func lapsedAt(lease *coordinationv1.Lease, now time.Time) bool {
	adv := v1alpha1.AdvertisedBy(lease)
	if lease.Spec.RenewTime == nil || !adv.MayRequeue || adv.FenceAfter == 0 {
		return false
	}
	return now.Sub(lease.Spec.RenewTime.Time) >= adv.FenceAfter
}

// MayHaveFenced reports whether remote work of d that this replica finds
// gone or cancelled may have been stopped by another replica's fence (a
// standby's, or a predecessor's that forgot with its restart): the lease
// lapsed near or past the fence deadline, and d's work was accepted before
// that. A wrong yes only turns a lost job into a requeued one.
func (l *Lease) MayHaveFenced(d *v1alpha1.Dispatch) bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	lapsed := l.lapsed
	l.mu.Unlock()
	accepted := apimeta.FindStatusCondition(d.Status.Conditions, v1alpha1.DispatchAccepted)
	return !lapsed.IsZero() && accepted != nil && accepted.Status == metav1.ConditionTrue &&
		accepted.LastTransitionTime.Time.Before(lapsed)
}

func (l *Lease) fill(lease *coordinationv1.Lease, now time.Time, policy v1alpha1.LeaseLossPolicy) {
	if lease.Labels == nil {
		lease.Labels = map[string]string{}
	}
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Labels[v1alpha1.LabelLeaseTarget] = v1alpha1.LabelValue(l.Target)
	lease.Annotations[v1alpha1.AnnotationLeaseTarget] = l.Target
	lease.Annotations[v1alpha1.AnnotationLeaseLoss] = string(policy)
	lease.Annotations[v1alpha1.AnnotationFenceAfterSeconds] = strconv.Itoa(int(ceilSeconds(l.FenceAfter)))
	lease.Annotations[v1alpha1.AnnotationStopWithinSeconds] = strconv.Itoa(int(ceilSeconds(l.stopWithin())))
	if ptr.Deref(lease.Spec.HolderIdentity, "") != l.identity {
		lease.Spec.HolderIdentity = ptr.To(l.identity)
		lease.Spec.AcquireTime = &metav1.MicroTime{Time: now}
		lease.Spec.LeaseTransitions = ptr.To(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
	}
	lease.Spec.LeaseDurationSeconds = ptr.To(ceilSeconds(l.Duration))
	// The agent's clock, for people reading the Lease; the hub never uses it.
	lease.Spec.RenewTime = &metav1.MicroTime{Time: now}
}

// watch reads the Lease another replica renews. A version that changed
// since the previous read was written after that read was sent.
func (l *Lease) watch(ctx context.Context) error {
	sent := l.Clock.Now()
	ctx, cancel := l.call(ctx)
	defer cancel()
	var lease coordinationv1.Lease
	if err := l.Reader.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: v1alpha1.LeaseName(l.Target)}, &lease); err != nil {
		if apierrors.IsNotFound(err) {
			l.mu.Lock()
			l.reached = true
			l.mu.Unlock()
		}
		return client.IgnoreNotFound(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reached = true
	l.mayRequeue = v1alpha1.AdvertisedBy(&lease).MayRequeue
	if l.seenVersion != "" && lease.ResourceVersion != l.seenVersion && l.seenSent.After(l.evidence) {
		l.evidence = l.seenSent
	}
	l.seenVersion, l.seenSent = lease.ResourceVersion, sent
	return nil
}

// fence stops every piece of remote work of this agent's namespace and
// remembers it, to report on its Dispatch later.
func (l *Lease) fence(ctx context.Context) error {
	works, err := l.Lister.ListRemote(ctx)
	if err != nil {
		return err
	}
	stopped := 0
	for _, w := range works {
		if w.DispatchNamespace != l.Namespace || w.Finished {
			continue // not ours, or ended: finished work is never stopped
		}
		// Remembered before the delete: a reconcile that finds the work gone
		// must read it as stopped by the fence, never as lost, on this
		// replica and (through the record) on the one that reports it.
		key := fencedKey{w.DispatchNamespace, w.DispatchName, w.Attempt}
		l.mu.Lock()
		deleted := l.fenced[key]
		l.fenced[key] = deleted
		l.mu.Unlock()
		if !deleted {
			if err := l.Record.Add(ctx, key, l.Clock.Now()); err != nil {
				// Stopping comes first: without the record the leader may
				// report the work lost rather than stopped.
				log.FromContext(ctx).Info("could not record a stop for the other replicas", "dispatch", key.namespace+"/"+key.name, "error", err.Error())
			}
		}
		// Deleted again each pass while its processes end (the delete is
		// idempotent), but counted and announced once.
		if err := l.Lister.Delete(ctx, w); err != nil {
			return err
		}
		if deleted {
			continue
		}
		l.mu.Lock()
		l.fenced[key] = true
		l.mu.Unlock()
		metrics.LeaseFences.Inc()
		stopped++
	}
	if stopped > 0 {
		msg := fmt.Sprintf("stopped %d remote jobs: the lease on the hub was not renewed for %s and the target's leaseLoss is Requeue", stopped, l.FenceAfter)
		log.FromContext(ctx).Info(msg)
		if l.Recorder != nil {
			l.Recorder.Event(leaseRef(l.Namespace, l.Target), corev1.EventTypeWarning, EventSelfFenced, msg)
		}
	}
	return nil
}

// leaseRef is the agent's Lease as the object its events are about.
func leaseRef(namespace, target string) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		TypeMeta:   metav1.TypeMeta{APIVersion: coordinationv1.SchemeGroupVersion.String(), Kind: "Lease"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: v1alpha1.LeaseName(target)},
	}
}

// Fenced reports whether the remote work of d's attempt was stopped for
// want of a lease and is not reported yet.
func (l *Lease) Fenced(d *v1alpha1.Dispatch) bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.fenced[fencedKey{d.Namespace, d.Name, d.Spec.Attempt}]
	return ok
}

// RecordedFence reports whether some replica recorded stopping the work
// of d's attempt (FenceRecord). A failed read counts as no: the work is
// then reported lost, as before the record.
func (l *Lease) RecordedFence(ctx context.Context, d *v1alpha1.Dispatch) bool {
	if l == nil {
		return false
	}
	ok, err := l.Record.Has(ctx, fencedKey{d.Namespace, d.Name, d.Spec.Attempt})
	if err != nil {
		log.FromContext(ctx).Info("could not read the replicas' record of stopped work", "error", err.Error())
	}
	return ok
}

// Reported forgets d's attempt once its Dispatch says it was stopped.
func (l *Lease) Reported(ctx context.Context, d *v1alpha1.Dispatch) {
	k := fencedKey{d.Namespace, d.Name, d.Spec.Attempt}
	l.mu.Lock()
	delete(l.fenced, k)
	l.mu.Unlock()
	if err := l.Record.Remove(ctx, k); err != nil {
		log.FromContext(ctx).V(1).Info("could not clear a reported stop from the record", "error", err.Error())
	}
}

// prune forgets, at most every fencedPruneInterval and only while the hub
// is in reach, the fenced attempts no Dispatch will report any more: the
// Dispatch is gone, has moved to another attempt, or has ended. Reported
// forgets the rest on the replica that reports them; a standby, which
// never reports, forgets them here, so the map holds only the attempts
// that still wait for their report.
func (l *Lease) prune(ctx context.Context) {
	l.mu.Lock()
	if len(l.fenced) == 0 || l.Clock.Since(l.prunedAt) < fencedPruneInterval {
		l.mu.Unlock()
		return
	}
	l.prunedAt = l.Clock.Now()
	keys := make([]fencedKey, 0, len(l.fenced))
	for k := range l.fenced {
		keys = append(keys, k)
	}
	l.mu.Unlock()
	for _, k := range keys {
		if ctx.Err() != nil {
			return
		}
		if done, err := l.reportedOrGone(ctx, k); err != nil {
			log.FromContext(ctx).V(1).Info("pruning stopped work", "dispatch", k.namespace+"/"+k.name, "error", err.Error())
			return // the next prune tries again
		} else if done {
			l.mu.Lock()
			delete(l.fenced, k)
			l.mu.Unlock()
			_ = l.Record.Remove(ctx, k) // best effort: the reporter removes it too
		}
	}
}

// reportedOrGone: no report of the fenced attempt k is due any more.
func (l *Lease) reportedOrGone(ctx context.Context, k fencedKey) (bool, error) {
	ctx, cancel := l.call(ctx)
	defer cancel()
	var d v1alpha1.Dispatch
	err := l.Reader.Get(ctx, client.ObjectKey{Namespace: k.namespace, Name: k.name}, &d)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, err
	}
	return d.Spec.Attempt != k.attempt || d.Status.Phase.IsFinal(), nil
}

// stopWithin is the backend's bound on how long stopped work lives on.
func (l *Lease) stopWithin() time.Duration {
	if l.Stop == nil {
		return 0
	}
	return l.Stop.StopWithin()
}

func ceilSeconds(d time.Duration) int32 { return int32((d + time.Second - 1) / time.Second) }

// leaseComponent names the lease keeper's failed fences
// (trainyard_sync_errors_total), declared at start and counted on failure.
const leaseComponent = "agent-lease"

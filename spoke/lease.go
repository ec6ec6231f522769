package spoke

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
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
// --lease-duration (the hub takes the longer of its own and the one the
// agent advertises in the Lease).
const (
	DefaultLeaseDuration      = 40 * time.Second
	DefaultLeaseRenewInterval = 10 * time.Second
	// EventSelfFenced is recorded on the agent's Lease when it stopped its
	// remote work for want of a lease.
	EventSelfFenced = "SelfFenced"
)

// Lease is the agent's right to run remote work: a coordination.k8s.io
// Lease in its agent namespace on the hub, renewed every RenewInterval by
// the elected replica. Every replica keeps evidence, on its own clock, that
// the hub sees the lease renewed: the send time of its own last successful
// renewal, or, when another replica renews, the send time of the last read
// that still showed the previous version (the renewal happened after it).
// Without evidence younger than Duration, it stops every piece of remote
// work of its target (the hub requeues only after Duration plus a grace),
// remembers what it stopped, and reports it on the Dispatches (reason
// AgentFenced) once it holds the lease again.
type Lease struct {
	// Hub writes the Lease; Reader reads it uncached.
	Hub           client.Client
	Reader        client.Reader
	Namespace     string
	Target        string
	Duration      time.Duration
	RenewInterval time.Duration
	Clock         clock.Clock
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
	fenced      map[fencedKey]bool
	// inherited is the moment of this replica's first renewal if the Lease
	// it took over had lapsed then: the previous holder (this process
	// before a restart, or another replica) may have stopped work the hub
	// has not heard of, and its memory of what it stopped is gone.
	inherited   time.Time
	renewedOnce bool
}

// fencedKey names the attempt of a Dispatch whose remote work was stopped.
type fencedKey struct {
	namespace, name string
	attempt         int32
}

// Start runs until ctx ends; it is a manager Runnable that runs on every
// replica, elected or not, so that a replica that lost its leader election
// while cut off still stops the work.
func (l *Lease) Start(ctx context.Context) error {
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
		if l.check() || l.Lister == nil || l.Clock.Since(lastFence) < l.RenewInterval {
			continue
		}
		lastFence = l.Clock.Now()
		if err := l.fence(ctx); err != nil {
			metrics.SyncError("agent-lease")
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
		return fmt.Errorf("no renewal of the lease on the hub seen for %s: remote work is stopped", l.Duration)
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

// renew writes the Lease; on success the send time is evidence.
func (l *Lease) renew(ctx context.Context) error {
	sent := l.Clock.Now()
	ctx, cancel := l.call(ctx)
	defer cancel()
	var lease coordinationv1.Lease
	err := l.Reader.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: v1alpha1.LeaseName(l.Target)}, &lease)
	switch {
	case apierrors.IsNotFound(err):
		lease = coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: v1alpha1.LeaseName(l.Target)}}
		l.fill(&lease, sent)
		err = l.Hub.Create(ctx, &lease)
	case err == nil:
		lapsed := lapsedAt(&lease, sent)
		l.fill(&lease, sent)
		if err = l.Hub.Update(ctx, &lease); err == nil {
			l.mu.Lock()
			if !l.renewedOnce && lapsed {
				l.inherited = sent
			}
			l.mu.Unlock()
		}
	}
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.renewedOnce = true
	if sent.After(l.evidence) {
		l.evidence = sent
	}
	l.seenVersion, l.seenSent = lease.ResourceVersion, sent
	l.reached = true
	l.mu.Unlock()
	return nil
}

// lapsedAt reports whether lease, as its last holder left it, ran out
// before now. The holder's renewTime is its own clock; agent replicas of one
// target run beside each other, so it is close enough to ours, and a wrong
// answer only turns a lost job into a requeued one.
func lapsedAt(lease *coordinationv1.Lease, now time.Time) bool {
	if lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil {
		return false
	}
	return now.Sub(lease.Spec.RenewTime.Time) >= time.Duration(*lease.Spec.LeaseDurationSeconds)*time.Second
}

// MayHaveFenced reports whether remote work of d that this replica finds
// gone or cancelled may have been stopped by a predecessor whose lease ran
// out: this replica took over a lapsed Lease, and d's work was accepted
// before that.
func (l *Lease) MayHaveFenced(d *v1alpha1.Dispatch) bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	inherited := l.inherited
	l.mu.Unlock()
	accepted := apimeta.FindStatusCondition(d.Status.Conditions, v1alpha1.DispatchAccepted)
	return !inherited.IsZero() && accepted != nil && accepted.Status == metav1.ConditionTrue &&
		accepted.LastTransitionTime.Time.Before(inherited)
}

func (l *Lease) fill(lease *coordinationv1.Lease, now time.Time) {
	if lease.Labels == nil {
		lease.Labels = map[string]string{}
	}
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Labels[v1alpha1.LabelLeaseTarget] = v1alpha1.LabelValue(l.Target)
	lease.Annotations[v1alpha1.AnnotationLeaseTarget] = l.Target
	if ptr.Deref(lease.Spec.HolderIdentity, "") != l.identity {
		lease.Spec.HolderIdentity = ptr.To(l.identity)
		lease.Spec.AcquireTime = &metav1.MicroTime{Time: now}
		lease.Spec.LeaseTransitions = ptr.To(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
	}
	lease.Spec.LeaseDurationSeconds = ptr.To(int32((l.Duration + time.Second - 1) / time.Second))
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
		if w.DispatchNamespace != l.Namespace {
			continue
		}
		// Remembered before the delete: a reconcile that finds the work gone
		// must read it as stopped by the fence, never as lost.
		key := fencedKey{w.DispatchNamespace, w.DispatchName, w.Attempt}
		l.mu.Lock()
		l.fenced[key] = true
		l.mu.Unlock()
		if err := l.Lister.Delete(ctx, w); err != nil {
			return err
		}
		metrics.LeaseFences.Inc()
		stopped++
	}
	if stopped > 0 {
		msg := fmt.Sprintf("stopped %d remote jobs: the lease on the hub was not renewed for %s", stopped, l.Duration)
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
	return l.fenced[fencedKey{d.Namespace, d.Name, d.Spec.Attempt}]
}

// Reported forgets d's attempt once its Dispatch says it was stopped.
func (l *Lease) Reported(d *v1alpha1.Dispatch) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.fenced, fencedKey{d.Namespace, d.Name, d.Spec.Attempt})
}

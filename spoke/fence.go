package spoke

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/internal/metrics"
)

// DefaultFenceMaxDeletes bounds the stale remote jobs one fence pass may
// delete; the rest wait for the next pass, after an Event says so.
const DefaultFenceMaxDeletes = 20

// Events of the fence, recorded on the agent's Lease.
const (
	EventFenceBounded    = "FenceBounded"
	EventFenceUnknownHub = "FenceUnknownHub"
)

// Fence deletes remote work whose Dispatch no longer exists or belongs to
// another attempt. That is stale work: the hub requeued the job while this
// agent was away, or deleted the Dispatch of a lost target without it. It
// runs at start and then at a fixed interval.
//
// "No Dispatch" means something only on the hub the work came from, so a
// pass first checks the hub's identity (Target status.hubID) against the
// one the agent was given (HubID) or first saw, and deletes nothing on a
// hub it does not know. Until the hub has written its identity a pass only
// waits: a hub that just started is not a stranger. A pass deletes at most
// MaxDeletes jobs.
type Fence struct {
	Hub       client.Reader
	Namespace string
	Target    string
	Lister    backends.RemoteLister
	Interval  time.Duration
	// MaxDeletes per pass (0: DefaultFenceMaxDeletes).
	MaxDeletes int
	Recorder   record.EventRecorder

	mu sync.Mutex
	// HubID is the hub identity the agent trusts: set by the operator
	// (--hub-id) or remembered from the first Target read.
	HubID string
}

// Start runs until ctx ends; it is a manager Runnable.
func (f *Fence) Start(ctx context.Context) error {
	every(ctx, f.Interval, nil, "agent-fence", func(ctx context.Context) error {
		_, err := f.Sweep(ctx)
		return err
	})
	return nil
}

// NeedLeaderElection: only the elected agent replica deletes.
func (f *Fence) NeedLeaderElection() bool { return true }

// Sweep deletes stale remote work once and reports how much it deleted.
func (f *Fence) Sweep(ctx context.Context) (int, error) {
	if known, err := f.knownHub(ctx); !known || err != nil {
		return 0, err
	}
	works, err := f.Lister.ListRemote(ctx)
	if err != nil {
		return 0, err
	}
	limit := f.MaxDeletes
	if limit <= 0 {
		limit = DefaultFenceMaxDeletes
	}
	attempts, err := f.liveAttempts(ctx, works)
	if err != nil {
		return 0, err
	}
	deleted := 0
	for _, w := range works {
		if w.DispatchNamespace != f.Namespace {
			continue // not ours to judge
		}
		if a, ok := attempts[w.DispatchName]; ok && a == strconv.Itoa(int(w.Attempt)) {
			continue // live
		}
		var d v1alpha1.Dispatch
		err := f.Hub.Get(ctx, client.ObjectKey{Namespace: w.DispatchNamespace, Name: w.DispatchName}, &d)
		why := fmt.Sprintf("the Dispatch is at attempt %d", d.Spec.Attempt)
		switch {
		case apierrors.IsNotFound(err):
			why = "the Dispatch is gone"
			d = v1alpha1.Dispatch{ObjectMeta: metav1.ObjectMeta{Namespace: w.DispatchNamespace, Name: w.DispatchName}}
		case err != nil:
			return deleted, err
		case d.Spec.Attempt == w.Attempt:
			continue // live
		}
		if deleted == limit {
			metrics.FenceHeld.WithLabelValues(metrics.FenceHeldBound).Inc()
			f.event(corev1.EventTypeWarning, EventFenceBounded, fmt.Sprintf(
				"deleted %d stale remote jobs, the most one pass may; more are left for the next pass", limit))
			return deleted, nil
		}
		log.FromContext(ctx).Info("deleting stale remote work", "remote", w.Ref.Name, "dispatch", w.DispatchName, "attempt", w.Attempt)
		if err := f.Lister.Delete(ctx, w); err != nil {
			return deleted, err
		}
		metrics.FenceDeleted()
		if f.Recorder != nil {
			f.Recorder.Event(&d, corev1.EventTypeWarning, EventFenced, fmt.Sprintf(
				"deleted stale remote work %s of attempt %d: %s", w.Ref.String(), w.Attempt, why))
		}
		deleted++
	}
	return deleted, nil
}

// fenceListPage bounds one page of liveAttempts' list.
const fenceListPage = 500

// liveAttempts lists the agent namespace's Dispatches from the hub, live
// and metadata only, and returns each one's attempt label by name: one
// request a pass keeps the live work, where a GET per remote job cost a
// thousand running jobs a thousand requests every pass. Work it does not
// show live is read in full before it is deleted. No work of ours, no list.
func (f *Fence) liveAttempts(ctx context.Context, works []backends.RemoteWork) (map[string]string, error) {
	if !slices.ContainsFunc(works, func(w backends.RemoteWork) bool { return w.DispatchNamespace == f.Namespace }) {
		return nil, nil
	}
	out := map[string]string{}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("DispatchList"))
	for page := ""; ; page = list.Continue {
		if err := f.Hub.List(ctx, list, client.InNamespace(f.Namespace), client.Limit(fenceListPage), client.Continue(page)); err != nil {
			return nil, err
		}
		for _, m := range list.Items {
			out[m.Name] = m.Labels[v1alpha1.LabelAttempt]
		}
		if list.Continue == "" {
			return out, nil
		}
	}
}

// knownHub reports whether the Target's hub identity is the trusted one;
// the first identity seen becomes trusted when none was given. A Target
// without one yet (its hub has not written it) is not known, and not an
// error either: the pass waits for the next interval. Another identity is.
func (f *Fence) knownHub(ctx context.Context) (bool, error) {
	var t v1alpha1.Target
	if err := f.Hub.Get(ctx, client.ObjectKey{Name: f.Target}, &t); err != nil {
		return false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	id := t.Status.HubID
	switch {
	case id == "":
		log.FromContext(ctx).V(1).Info("fence waits for the hub to record its identity", "target", f.Target)
		return false, nil
	case f.HubID == "":
		f.HubID = id
		return true, nil
	case id == f.HubID:
		return true, nil
	}
	metrics.FenceHeld.WithLabelValues(metrics.FenceHeldUnknownHub).Inc()
	msg := fmt.Sprintf("the hub's identity %q is not the one this agent knows (%q): no stale work is deleted", id, f.HubID)
	f.event(corev1.EventTypeWarning, EventFenceUnknownHub, msg)
	return false, fmt.Errorf("fence held: %s", msg)
}

func (f *Fence) event(typ, reason, msg string) {
	if f.Recorder != nil {
		f.Recorder.Event(leaseRef(f.Namespace, f.Target), typ, reason, msg)
	}
}

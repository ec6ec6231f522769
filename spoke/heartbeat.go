package spoke

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/internal/metrics"
)

// Version is the agent version it reports; set at build time.
var Version = "dev"

// Heartbeat publishes the target's capacity and a heartbeat into the
// Target's status at a fixed interval. A backend that cannot be reached still
// gets a heartbeat, with BackendReachable=False: the agent is alive, its
// system is not.
type Heartbeat struct {
	Hub      client.Client
	Target   string
	Backend  backends.Backend
	Clock    clock.Clock
	Interval time.Duration
	// Kick asks for a heartbeat now, for example when remote jobs ended and
	// freed capacity the hub should hear of before the next interval.
	// A kicked heartbeat waits MinKickGap, so kicks in a burst share one.
	Kick <-chan struct{}
	// Elected is closed once this replica leads (nil: at once); Ready
	// judges the backend only then, as only the elected replica calls it.
	Elected <-chan struct{}
	// Readings numbers the capacity readings it publishes (nil: none
	// numbered; the hub then judges by times).
	Readings *CapacityReadings

	mu sync.Mutex
	// answered: a capacity call succeeded; capErr: the last one's error.
	answered bool
	capErr   error
}

// MinKickGap spaces kicked heartbeats, so a burst of job ends costs one.
const MinKickGap = 500 * time.Millisecond

// Start runs until ctx ends; it is a manager Runnable.
func (h *Heartbeat) Start(ctx context.Context) error {
	every(ctx, h.Interval, h.Kick, "agent-heartbeat", h.Beat)
	return nil
}

// every runs fn now, then at each interval and on each kick (nil: never),
// until ctx ends, counting and logging its failures under component. A
// kick waits MinKickGap first, so a burst of kicks costs one run.
func every(ctx context.Context, interval time.Duration, kick <-chan struct{}, component string, fn func(context.Context) error) {
	metrics.DeclareSyncErrors(component)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := fn(ctx); err != nil && ctx.Err() == nil {
			metrics.SyncError(component)
			log.FromContext(ctx).Error(err, component+" failed")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-kick:
			select {
			case <-ctx.Done():
				return
			case <-time.After(MinKickGap):
			}
		}
	}
}

// NeedLeaderElection: only the elected agent replica reports.
func (h *Heartbeat) NeedLeaderElection() bool { return true }

// Ready is the backend's readiness check: once this replica leads, its
// backend must have answered a capacity call, the last one included. A
// standby calls no backend and is not judged on it.
func (h *Heartbeat) Ready(*http.Request) error {
	if h.Elected != nil {
		select {
		case <-h.Elected:
		default:
			return nil
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.capErr != nil:
		return fmt.Errorf("the backend did not answer the last capacity call: %w", h.capErr)
	case !h.answered:
		return errors.New("the backend has not answered a capacity call yet")
	}
	return nil
}

// Beat sends one heartbeat.
func (h *Heartbeat) Beat(ctx context.Context) error {
	// The reading is numbered before it starts: work seen running before
	// this line is counted by it.
	var cur v1alpha1.Target
	getErr := h.Hub.Get(ctx, client.ObjectKey{Name: h.Target}, &cur)
	reading, numbered := h.Readings.begin(cur.Status.CapacityReading, getErr == nil)
	start := time.Now()
	capacity, capErr := h.Backend.Capacity(ctx)
	metrics.BackendCall(h.Backend, metrics.OpCapacity, start, capErr != nil)
	h.mu.Lock()
	h.capErr = capErr
	h.answered = h.answered || capErr == nil
	h.mu.Unlock()
	now := metav1.NewTime(h.Clock.Now())
	reach := metav1.Condition{Type: v1alpha1.TargetBackendReachable, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonBackendReachable, Message: "the backend answers", LastTransitionTime: now}
	if capErr != nil {
		reach.Status, reach.Reason, reach.Message = metav1.ConditionFalse, v1alpha1.ReasonBackendError, capErr.Error()
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var t v1alpha1.Target
		if err := h.Hub.Get(ctx, client.ObjectKey{Name: h.Target}, &t); err != nil {
			return err
		}
		st := &t.Status
		st.LastHeartbeatTime = &now
		st.AgentVersion = Version
		st.ObservedGeneration = t.Generation
		if capacity != nil && numbered && reading <= st.CapacityReading {
			// Another replica published a later reading meanwhile; this one
			// is older.
			capacity = nil
		}
		if capacity != nil {
			if numbered {
				st.CapacityReading = reading
			}
			st.Capacity, st.Free, st.Topology = capacity.Capacity, capacity.Free, capacity.Topology
			st.MaxGPUsPerNode = capacity.MaxGPUsPerNode
			st.FreeGPUs = 0
			if q, ok := capacity.Free[v1alpha1.GPUResource]; ok {
				st.FreeGPUs = q.Value()
			}
		}
		if old := apimeta.FindStatusCondition(st.Conditions, reach.Type); old != nil && old.Status == reach.Status {
			reach.LastTransitionTime = old.LastTransitionTime
		}
		apimeta.SetStatusCondition(&st.Conditions, reach)
		return h.Hub.Status().Update(ctx, &t)
	})
}

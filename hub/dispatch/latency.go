package dispatch

import (
	"fmt"
	"sync"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/internal/metrics"
)

// latencyTracker observes admission-to-running once per Workload attempt.
// It keeps one entry per Workload, the attempt last observed, dropped when
// the Workload is torn down or gone: its size is bounded by the Workloads
// that exist.
type latencyTracker struct {
	mu   sync.Mutex
	seen map[types.NamespacedName]string
}

func newLatencyTracker() *latencyTracker {
	return &latencyTracker{seen: map[types.NamespacedName]string{}}
}

// first reports whether attempt (the Workload's UID and attempt) of wl is
// observed for the first time.
func (l *latencyTracker) first(wl types.NamespacedName, attempt string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen[wl] == attempt {
		return false
	}
	l.seen[wl] = attempt
	return true
}

func (l *latencyTracker) forget(wl types.NamespacedName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.seen, wl)
}

func (r *Reconciler) observeRunning(s *state) {
	c := apimeta.FindStatusCondition(s.wl.Status.Conditions, kueue.WorkloadQuotaReserved)
	if c == nil || !r.latency.first(client.ObjectKeyFromObject(s.wl), fmt.Sprintf("%s/%d", s.wl.UID, s.live.Spec.Attempt)) {
		return
	}
	start := c.LastTransitionTime.Time
	if s.live.Status.StartTime != nil {
		metrics.ObserveAdmissionToRunning(s.live.Spec.TargetName, s.live.Status.StartTime.Sub(start))
		return
	}
	metrics.ObserveAdmissionToRunning(s.live.Spec.TargetName, r.clock.Since(start))
}

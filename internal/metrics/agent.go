package metrics

import (
	"path"
	"reflect"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Backend operations, the methods of backends.Backend.
const (
	OpSubmit   = "submit"
	OpObserve  = "observe"
	OpCancel   = "cancel"
	OpCapacity = "capacity"
)

var (
	// BackendCallDuration observes each backend call of an agent.
	BackendCallDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "backend_call_duration_seconds",
		Help:    "Seconds an agent's backend call took, by backend (jobset, lws, slurm) and operation.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
	}, []string{"backend", "op"})

	// BackendCallErrors counts backend calls that failed. A refusal
	// (ErrRejected) and an Observe of work not made yet are answers, not failures.
	BackendCallErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "backend_call_errors_total",
		Help: "Failed backend calls of an agent, by backend and operation.",
	}, []string{"backend", "op"})

	// FenceDeletions counts stale remote work the agent's fence deleted.
	FenceDeletions = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: namespace, Name: "fence_deletions_total",
		Help: "Remote work the agent deleted because its Dispatch is gone or belongs to another attempt.",
	})
)

// BackendCall records one call of op on backend that began at start.
func BackendCall(backend any, op string, start time.Time, failed bool) {
	name := BackendName(backend)
	BackendCallDuration.WithLabelValues(name, op).Observe(time.Since(start).Seconds())
	if failed {
		BackendCallErrors.WithLabelValues(name, op).Inc()
	}
}

// BackendName is the backend's package name (jobset, lws, slurm), which is
// what the label says; the agent holds one backend, so this costs nothing
// to keep stable.
func BackendName(backend any) string {
	t := reflect.TypeOf(backend)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.PkgPath() == "" {
		return "unknown"
	}
	return path.Base(t.PkgPath())
}

// FenceDeleted counts one deletion of stale remote work.
func FenceDeleted() { FenceDeletions.Inc() }

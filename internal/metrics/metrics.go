// Package metrics is every Prometheus metric trainyard exports, hub and
// agent alike, registered on controller-runtime's registry so they appear on
// the manager's /metrics endpoint.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

const namespace = "trainyard"

// Results of a dispatch decision.
const (
	ResultDispatched = "dispatched"
	ResultNoCapacity = "no_capacity"
	ResultRejected   = "rejected"
	ResultError      = "error"
	ResultRequeued   = "requeued"
	// ResultRefused: the target's agent refused a placed job, which is placed again.
	ResultRefused = "refused"
)

var (
	// Dispatches counts dispatch decisions by target and result.
	Dispatches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "dispatches_total",
		Help: "Dispatch decisions by target and result (dispatched, no_capacity, rejected, requeued, error).",
	}, []string{"target", "result"})

	// AdmissionToRunning observes the time from Kueue's quota reservation
	// to the remote work running.
	AdmissionToRunning = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "admission_to_running_seconds",
		Help:    "Seconds from Kueue quota reservation to the remote work running, by target.",
		Buckets: prometheus.ExponentialBuckets(0.25, 2, 14),
	}, []string{"target"})

	// HeartbeatAge is the age of each target's last agent heartbeat.
	HeartbeatAge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Name: "target_heartbeat_age_seconds",
		Help: "Seconds since the target's agent last reported, as seen by the hub.",
	}, []string{"target"})

	// SyncErrors counts failed reconciles by component.
	SyncErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "sync_errors_total",
		Help: "Failed syncs by component (hub-dispatch, hub-targets, agent-dispatch, agent-heartbeat, agent-fence).",
	}, []string{"component"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(Dispatches, AdmissionToRunning, HeartbeatAge, SyncErrors)
}

// Dispatched records one decision for target ("" when none was chosen).
func Dispatched(target, result string) { Dispatches.WithLabelValues(target, result).Inc() }

// ObserveAdmissionToRunning records the latency of one job.
func ObserveAdmissionToRunning(target string, d time.Duration) {
	AdmissionToRunning.WithLabelValues(target).Observe(d.Seconds())
}

// SyncError counts a failed sync of component.
func SyncError(component string) { SyncErrors.WithLabelValues(component).Inc() }

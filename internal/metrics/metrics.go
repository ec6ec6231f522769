// Package metrics is every Prometheus metric trainyard exports, hub and
// agent alike, registered on controller-runtime's registry so they appear on
// the manager's /metrics endpoint. This file holds the hub's event metrics;
// agent.go the agent's, state.go the gauges counted from a manager's cache
// at each scrape, progress.go the running TrainJobs' progress, and
// transport.go the API write errors.
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
		Help: "Dispatch decisions by target and result (dispatched, no_capacity, rejected, refused, requeued, error).",
	}, []string{"target", "result"})

	// AdmissionToRunning observes the time from Kueue's quota reservation
	// to the remote work running.
	AdmissionToRunning = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "admission_to_running_seconds",
		Help:    "Seconds from Kueue quota reservation to the remote work running, by target.",
		Buckets: prometheus.ExponentialBuckets(0.25, 2, 14),
	}, []string{"target"})

	// DecisionDuration observes one placement decision and the Dispatch
	// create that records it.
	DecisionDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "decision_duration_seconds",
		Help:    "Seconds the hub took to place one attempt and create its Dispatch, by chosen target (empty: none).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	}, []string{"target"})

	// SyncErrors counts failed reconciles by component.
	SyncErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "sync_errors_total",
		Help: "Failed syncs by component (hub-dispatch, hub-targets, agent-dispatch, agent-heartbeat, agent-fence).",
	}, []string{"component"})

	// APIWriteErrors counts failed writes to the hub API server.
	APIWriteErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "api_write_errors_total",
		Help: "Failed writes to the hub API server by resource, verb and HTTP code (0: no answer).",
	}, []string{"resource", "verb", "code"})
)

// byTarget are the vectors with a target label: ForgetTarget clears them.
// A new vector with a target label belongs here.
var byTarget = []*prometheus.MetricVec{Dispatches.MetricVec, AdmissionToRunning.MetricVec, DecisionDuration.MetricVec,
	LeaseAge.MetricVec}

func init() { Register(ctrlmetrics.Registry) }

// Register adds every trainyard metric to reg; init does it for
// controller-runtime's registry.
func Register(reg prometheus.Registerer) {
	reg.MustRegister(Dispatches, AdmissionToRunning, DecisionDuration, SyncErrors, APIWriteErrors,
		BackendCallDuration, BackendCallErrors, FenceDeletions, newStateCollector(&sources, &heartbeats),
		progressCollector{set: &progress})
}

// Dispatched records one decision for target ("" when none was chosen).
func Dispatched(target, result string) { Dispatches.WithLabelValues(target, result).Inc() }

// ObserveAdmissionToRunning records the latency of one job.
func ObserveAdmissionToRunning(target string, d time.Duration) {
	AdmissionToRunning.WithLabelValues(target).Observe(d.Seconds())
}

// ObserveDecision records one placement and Dispatch create that began at start.
func ObserveDecision(target string, start time.Time) {
	DecisionDuration.WithLabelValues(target).Observe(time.Since(start).Seconds())
}

// SyncError counts a failed sync of component.
func SyncError(component string) { SyncErrors.WithLabelValues(component).Inc() }

// DeclareSyncErrors makes component's failed-sync series exist, at 0, from
// its start: a rate over a series that appears only with the first
// failure (the alert's) reads nothing until then, and a dashboard cannot
// tell a healthy component from a missing one.
func DeclareSyncErrors(component string) { SyncErrors.WithLabelValues(component) }

// ForgetTarget deletes every series of a deleted Target, whatever its other
// labels. The gauges of state.go are counted from the Targets that exist.
func ForgetTarget(target string) {
	heartbeats.forget(target)
	for _, v := range byTarget {
		v.DeletePartialMatch(prometheus.Labels{"target": target})
	}
}

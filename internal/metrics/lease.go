package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Agent leases: the hub's judgement and the agents' self-fencing.
var (
	// LeaseAge is how long ago the hub observed each target's agent renew
	// its lease, on the hub's clock.
	LeaseAge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Name: "target_lease_age_seconds",
		Help: "Seconds since the hub last observed the target's agent renew its lease (hub clock).",
	}, []string{"target"})

	// DisruptionMode is 1 while the hub holds back every requeue because
	// more than the disruption threshold of targets went silent at once.
	DisruptionMode = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "hub_disruption_mode",
		Help: "1 while so many targets are silent that the hub assumes it is cut off and requeues nothing.",
	})

	// SilentTargets is how many targets' leases have run out on the hub's clock.
	SilentTargets = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "hub_silent_targets",
		Help: "Targets whose agent lease ran out on the hub's clock.",
	})

	// LeaseFences counts remote work an agent stopped because it could not
	// renew its lease.
	LeaseFences = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: namespace, Name: "agent_lease_fenced_total",
		Help: "Remote jobs the agent stopped because it could not renew its lease on the hub.",
	})

	// FenceHeld counts fence passes an agent held back: bound (it stopped at
	// its per-pass limit) or unknown_hub (the hub's identity is not the one
	// it first saw).
	FenceHeld = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "agent_fence_held_total",
		Help: "Fence passes held back: bound (per-pass delete limit reached) or unknown_hub.",
	}, []string{"why"})
)

// Reasons a fence pass is held back.
const (
	FenceHeldBound      = "bound"
	FenceHeldUnknownHub = "unknown_hub"
)

func init() {
	ctrlmetrics.Registry.MustRegister(LeaseAge, DisruptionMode, SilentTargets, LeaseFences, FenceHeld)
}

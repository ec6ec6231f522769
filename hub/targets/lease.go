package targets

import (
	"sync"
	"time"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// Defaults of the lease judgement. An agent renews every 10 s (spoke
// DefaultLeaseRenewInterval), so a 40 s lease rides out three lost
// renewals; the 20 s grace covers the agent's stop of its remote work
// (a JobSet delete or scancel) and is longer than one renew interval, so
// a hub cut off from every agent sees them all silent (disruption) before
// the first one's grace ends.
const (
	DefaultLeaseDuration       = 40 * time.Second
	DefaultLeaseGrace          = 20 * time.Second
	DefaultDisruptionThreshold = 0.55
	// silentRecheck paces re-judging a silent target, so the end of
	// disruption mode is noticed without a lease event.
	silentRecheck = 5 * time.Second
)

// LeaseSettings are the hub's lease parameters.
type LeaseSettings struct {
	// Duration is how long a lease lasts after the hub saw it renewed. An
	// agent that advertises a longer one (its Lease's leaseDurationSeconds)
	// gets that.
	Duration time.Duration
	// Grace is added before the hub requeues: the agent has stopped its
	// remote work by then.
	Grace time.Duration
	// DisruptionThreshold: when more than this share of all targets is
	// silent, the hub requeues nothing.
	DisruptionThreshold float64
}

func (s *LeaseSettings) defaults() {
	if s.Duration == 0 {
		s.Duration = DefaultLeaseDuration
	}
	if s.Grace == 0 {
		s.Grace = DefaultLeaseGrace
	}
	if s.DisruptionThreshold == 0 {
		s.DisruptionThreshold = DefaultDisruptionThreshold
	}
}

// observation is what the hub saw of one target's lease, on its own clock.
type observation struct {
	// version is the Lease's resourceVersion at the last observed renewal
	// ("" while no Lease exists).
	version string
	// at is when this hub process observed version first, or first saw the
	// target when it has never seen a renewal: a hub that restarts gives
	// every agent a full lease.
	at time.Time
	// renewed: at least one Lease was seen.
	renewed bool
	// duration is the lease length this target is judged by.
	duration time.Duration
}

// tracker holds the observations of every target and the disruption state.
// The agent's own timestamps are never read: only whether the Lease changed.
type tracker struct {
	mu        sync.Mutex
	seen      map[string]*observation
	disrupted bool
}

func newTracker() *tracker { return &tracker{seen: map[string]*observation{}} }

// observe records the Lease version the hub sees now and returns the
// target's observation. A changed version is a renewal, observed now.
func (t *tracker) observe(target, version string, duration time.Duration, now time.Time) observation {
	t.mu.Lock()
	defer t.mu.Unlock()
	o, ok := t.seen[target]
	if !ok {
		o = &observation{version: version, at: now}
		t.seen[target] = o
	}
	if version != "" && version != o.version {
		o.version, o.at = version, now
	}
	o.renewed = o.renewed || version != ""
	o.duration = duration
	return *o
}

func (t *tracker) forget(target string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.seen, target)
}

// fleet counts the targets whose lease ran out at now, and returns whether
// that makes a disruption, and whether the disruption state just changed.
func (t *tracker) fleet(now time.Time, threshold float64) (silent, total int, disrupted, changed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, o := range t.seen {
		total++
		if now.Sub(o.at) > o.duration {
			silent++
		}
	}
	disrupted = inDisruption(silent, total, threshold)
	changed = disrupted != t.disrupted
	t.disrupted = disrupted
	return silent, total, disrupted, changed
}

// inDisruption: more than threshold of all targets are silent at once. A
// fleet of one is in disruption whenever its target is silent: requeueing
// its jobs could place them nowhere else, and its agent reports the work
// it stopped when it returns.
func inDisruption(silent, total int, threshold float64) bool {
	return total > 0 && silent > 0 && float64(silent)/float64(total) > threshold
}

// verdict is the judgement of one target's lease.
type verdict struct {
	reason string
	// lost: requeue its Dispatches.
	lost bool
	// recheck is when to judge again without an event.
	recheck time.Duration
}

// policy is what the Target's spec says about losing its lease.
type policy struct {
	// hold: leaseLoss is Hold; expired work waits for the agent.
	hold bool
	// outOfService: an operator said nothing of the target runs any more.
	outOfService bool
}

func policyOf(t *v1alpha1.Target) policy {
	return policy{hold: t.Spec.LeaseLoss == v1alpha1.LeaseLossHold, outOfService: t.Spec.OutOfService}
}

// judge decides one target's availability from the age of its lease on the
// hub's clock, the lease and grace, the fleet's disruption state and the
// target's policy. Only an operator's outOfService cuts the grace or
// overrides disruption mode: it is their word that nothing runs there.
func judge(o observation, age, grace time.Duration, disrupted bool, p policy) verdict {
	switch {
	case !o.renewed && age <= o.duration:
		return verdict{reason: v1alpha1.ReasonNoHeartbeat, recheck: o.duration - age + time.Second}
	case age <= o.duration:
		return verdict{reason: v1alpha1.ReasonHeartbeatFresh, recheck: o.duration - age + time.Second}
	case p.outOfService:
		return verdict{reason: v1alpha1.ReasonOutOfService, lost: true, recheck: silentRecheck}
	case disrupted:
		return verdict{reason: v1alpha1.ReasonHubDisrupted, recheck: silentRecheck}
	case age <= o.duration+grace:
		return verdict{reason: v1alpha1.ReasonLeaseNotRenewed, recheck: min(o.duration+grace-age+time.Second, silentRecheck)}
	case p.hold:
		return verdict{reason: v1alpha1.ReasonAwaitingAgent, recheck: silentRecheck}
	}
	return verdict{reason: v1alpha1.ReasonLeaseExpired, lost: true, recheck: silentRecheck}
}

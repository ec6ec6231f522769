package targets

import (
	"sync"
	"time"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// Defaults of the lease judgement. An agent renews every 10 s (spoke
// DefaultLeaseRenewInterval), so a 40 s lease rides out three lost
// renewals before the target takes no new jobs. Running jobs are requeued
// only after the fence deadline (spoke DefaultFenceAfter, longer than the
// hub outages and upgrades an operator lives through), the agent's
// advertised stop bound and the grace, which covers the agent's stop call
// (a JobSet delete or scancel) and one renew interval.
const (
	DefaultLeaseDuration       = 40 * time.Second
	DefaultFenceAfter          = 15 * time.Minute
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
	// gets that. A target silent this long takes no new jobs.
	Duration time.Duration
	// FenceAfter is how long a Requeue target's agent goes without a
	// renewal before it stops its running work; an agent that advertises a
	// longer one gets that.
	FenceAfter time.Duration
	// Grace is added, with the agent's advertised stop bound, before the
	// hub requeues: the agent's stopped work has ended by then.
	Grace time.Duration
	// DisruptionThreshold: when more than this share of all targets is
	// silent, the hub requeues nothing.
	DisruptionThreshold float64
}

func (s *LeaseSettings) defaults() {
	if s.Duration == 0 {
		s.Duration = DefaultLeaseDuration
	}
	if s.FenceAfter == 0 {
		s.FenceAfter = DefaultFenceAfter
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
	// enforced is what the agent's Lease says it does when silent.
	enforced v1alpha1.Advertised
}

// tracker holds the observations of every target and the disruption state.
// The agent's own timestamps are never read: only whether the Lease changed.
type tracker struct {
	mu        sync.Mutex
	seen      map[string]*observation
	disrupted bool
	// sight is the hub's view of its own API server: lastSeen is when a
	// probe of it last succeeded, since when the current unbroken spell
	// of such probes began. Time outside a spell is never counted as an
	// agent's silence.
	lastSeen, since time.Time
}

func newTracker(now time.Time) *tracker {
	return &tracker{seen: map[string]*observation{}, lastSeen: now, since: now}
}

// blindAfter: a hub whose probe of its own API server has not succeeded
// for this long cannot observe its agents' leases.
const blindAfter = 3 * probeInterval

// sighted records a successful probe of the hub's API server at now. After
// a blind spell every target's lease counts from now, as after a hub
// restart; it reports whether a blind spell ended.
func (t *tracker) sighted(now time.Time) (ended bool, blind time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if gap := now.Sub(t.lastSeen); gap > blindAfter {
		ended, blind, t.since = true, gap, now
	}
	t.lastSeen = now
	return ended, blind
}

// age is how long the hub has watched target's lease go unrenewed, not
// counting any time it was blind; blind reports whether it is blind now.
func (t *tracker) age(o observation, now time.Time) (age time.Duration, blind bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	from := o.at
	if t.since.After(from) {
		from = t.since
	}
	return now.Sub(from), now.Sub(t.lastSeen) > blindAfter
}

// observe records the Lease version the hub sees now and returns the
// target's observation. A changed version is a renewal, observed now.
func (t *tracker) observe(target, version string, duration time.Duration, enforced v1alpha1.Advertised, now time.Time) observation {
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
	o.duration, o.enforced = duration, enforced
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
		from := o.at
		if t.since.After(from) {
			from = t.since
		}
		if now.Sub(from) > o.duration {
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

// requeueAfter is how long a silent target's jobs wait before the hub may
// requeue them: the agent's fence deadline (the longer of the hub's and the
// agent's own), then the agent's bound on its stopped work's end, then the
// grace.
func requeueAfter(o observation, s LeaseSettings) time.Duration {
	return max(s.FenceAfter, o.enforced.FenceAfter) + o.enforced.StopWithin + s.Grace
}

// judge decides one target's availability from the age of its lease on the
// hub's clock (time the hub was blind not counted), the settings, the
// fleet's disruption state, the target's policy and what its agent says
// it enforces. A silent target takes no new jobs; its running jobs are
// requeued only where both the Target and its agent say Requeue, once the
// agent has stopped them. Only an operator's outOfService cuts the wait or
// overrides disruption mode: it is their word that nothing runs there.
func judge(o observation, age time.Duration, s LeaseSettings, disrupted, blind bool, p policy) verdict {
	wait := requeueAfter(o, s)
	switch {
	case !o.renewed && age <= o.duration:
		return verdict{reason: v1alpha1.ReasonNoHeartbeat, recheck: o.duration - age + time.Second}
	case age <= o.duration:
		return verdict{reason: v1alpha1.ReasonHeartbeatFresh, recheck: o.duration - age + time.Second}
	case blind:
		return verdict{reason: v1alpha1.ReasonHubDisrupted, recheck: silentRecheck}
	case p.outOfService:
		return verdict{reason: v1alpha1.ReasonOutOfService, lost: true, recheck: silentRecheck}
	case disrupted:
		return verdict{reason: v1alpha1.ReasonHubDisrupted, recheck: silentRecheck}
	case age <= wait:
		return verdict{reason: v1alpha1.ReasonLeaseNotRenewed, recheck: min(wait-age+time.Second, silentRecheck)}
	case p.hold || !o.enforced.MayRequeue:
		return verdict{reason: v1alpha1.ReasonAwaitingAgent, recheck: silentRecheck}
	}
	return verdict{reason: v1alpha1.ReasonLeaseExpired, lost: true, recheck: silentRecheck}
}

package metrics

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// The gauges of this file are counted at each scrape from a manager's
// cache (no API call, no lock of the controllers), so they are current even
// when nothing reconciles, and a deleted Target's series go with it.

// collectTimeout bounds one scrape's reads of the cache.
const collectTimeout = 5 * time.Second

// HubState is a manager Runnable: while it runs, scrapes count Targets
// from Reader (the manager's cache); what is in flight and what waits for
// room come from HubFlight.
type HubState struct {
	Reader client.Reader
	Clock  clock.PassiveClock
}

// AgentState is a manager Runnable: while it runs, scrapes count the
// Dispatches of Target in the agent namespace by phase.
type AgentState struct {
	Reader            client.Reader
	Namespace, Target string
}

// HubFlight is a manager Runnable: while it runs, scrapes read the
// Dispatches in flight from Counts, the dispatch controller's own record
// kept by its Dispatch watch, instead of listing every Dispatch. It runs
// on the elected replica only, the one whose record is kept.
type HubFlight struct {
	Counts func() FlightCounts
}

// FlightCounts is the hub's in-flight record as the gauges read it.
type FlightCounts struct {
	// InFlight counts, per target, the Dispatches not yet running (booked,
	// Pending or Submitted); Queued those of them sent to wait in the
	// target's own queue.
	InFlight, Queued map[string]int
	// QueueLimit is, per target that takes queued jobs, how many the hub
	// keeps in its queue now: spec.slurm.queueDepth, or deeper while jobs
	// start there faster than the hub refills it.
	QueueLimit map[string]int
	// Waiting is the record's line of Workloads waiting for room.
	Waiting []WaitingJob
}

// WaitingJob is one Workload of the waiting line: the flavors it was
// admitted with, those of its ClusterQueue, and since when it has waited.
type WaitingJob struct {
	Flavors      []string
	QueueFlavors []string
	Since        time.Time
}

// Start registers h as a source until ctx ends.
func (h *HubState) Start(ctx context.Context) error { return sources.run(ctx, h) }

// Start registers f as a source until ctx ends.
func (f *HubFlight) Start(ctx context.Context) error { return sources.run(ctx, f) }

// NeedLeaderElection: only the elected replica keeps the record.
func (f *HubFlight) NeedLeaderElection() bool { return true }

// Start registers a as a source until ctx ends.
func (a *AgentState) Start(ctx context.Context) error { return sources.run(ctx, a) }

// NeedLeaderElection: every replica reports what its cache holds.
func (h *HubState) NeedLeaderElection() bool { return false }

// NeedLeaderElection: every replica reports what its cache holds.
func (a *AgentState) NeedLeaderElection() bool { return false }

// sourceSet is the running HubStates and AgentStates of this process.
type sourceSet struct {
	mu   sync.Mutex
	list []any
}

var sources sourceSet

func (s *sourceSet) run(ctx context.Context, src any) error {
	s.mu.Lock()
	s.list = append(s.list, src)
	s.mu.Unlock()
	<-ctx.Done()
	s.mu.Lock()
	s.list = slices.DeleteFunc(s.list, func(x any) bool { return x == src })
	s.mu.Unlock()
	return nil
}

func (s *sourceSet) snapshot() []any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.list)
}

// beatSet holds, per target, when the hub last saw its agent renew and how
// long the hub lets it be silent before it is lost.
type beatSet struct {
	mu sync.Mutex
	m  map[string]beat
}

type beat struct {
	at        time.Time
	lostAfter time.Duration
}

var heartbeats = beatSet{m: map[string]beat{}}

// ObserveHeartbeat records that the hub last saw target's agent renew at at
// (on the hub's clock), and that the target is lost once lostAfter has
// passed since. Scrapes report it as a timestamp and an age that keeps
// growing while the target is silent.
func ObserveHeartbeat(target string, at time.Time, lostAfter time.Duration) {
	heartbeats.mu.Lock()
	defer heartbeats.mu.Unlock()
	heartbeats.m[target] = beat{at: at, lostAfter: lostAfter}
}

func (b *beatSet) get(target string) (beat, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	x, ok := b.m[target]
	return x, ok
}

func (b *beatSet) forget(target string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, target)
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
}

var (
	targetAvailableDesc = desc("target_available", "1 when the Target's Available condition is True, else 0.", "target")
	awaitingAgentDesc   = desc("target_awaiting_agent",
		"1 while the Target's lease ran out and, its leaseLoss being Hold, its jobs wait for the agent or an operator's outOfService.", "target")
	lastHeartbeatDesc = desc("target_last_heartbeat_timestamp_seconds",
		"Unix time (hub clock) the hub last saw the Target's agent renew; alert on time() minus it.", "target")
	heartbeatAgeDesc = desc("target_heartbeat_age_seconds", "Seconds since the hub last saw the Target's agent renew, by the hub's clock.", "target")
	lostAfterDesc    = desc("target_lost_after_seconds",
		"Seconds of silence after which the hub declares the Target lost and requeues its jobs (lease plus grace).", "target")
	inFlightDesc = desc("dispatches_in_flight", "Dispatches to the Target not yet Running (Pending or Submitted).", "target")
	queuedDesc   = desc("dispatches_queued",
		"Dispatches sent to the Target beyond what it had free, to wait in its own queue (spec.slurm.queueDepth), not yet Running.", "target")
	queueLimitDesc = desc("dispatches_queue_limit",
		"How many Dispatches the hub keeps in the Target's own queue now: spec.slurm.queueDepth, or deeper while jobs start there faster than the hub refills it.", "target")
	queueDepthDesc = desc("queue_depth",
		"Workloads waiting for a placement because no target had room, under each Target serving their flavors (target empty: none serves them).", "target")
	oldestWaitDesc = desc("queue_oldest_wait_seconds", "Seconds the longest-waiting Workload of queue_depth has waited.", "target")
	agentPhaseDesc = desc("agent_dispatches", "The agent's Dispatches by phase.", "target", "phase")
)

// stateCollector emits the gauges of the running sources.
type stateCollector struct {
	sources *sourceSet
	beats   *beatSet
}

func newStateCollector(s *sourceSet, b *beatSet) prometheus.Collector {
	return &stateCollector{sources: s, beats: b}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{targetAvailableDesc, awaitingAgentDesc, lastHeartbeatDesc, heartbeatAgeDesc, lostAfterDesc,
		inFlightDesc, queuedDesc, queueLimitDesc, queueDepthDesc, oldestWaitDesc, agentPhaseDesc} {
		ch <- d
	}
}

// Collect counts from the first hub source (a process runs one hub; more
// would repeat its series), with the first in-flight record, and from one
// agent source per target.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), collectTimeout)
	defer cancel()
	all := c.sources.snapshot()
	var flight *HubFlight
	for _, src := range all {
		if f, ok := src.(*HubFlight); ok && flight == nil {
			flight = f
		}
	}
	hubDone, agentDone := false, map[string]bool{}
	for _, src := range all {
		switch s := src.(type) {
		case *HubState:
			if !hubDone {
				hubDone = true
				c.collectHub(ctx, s, flight, ch)
			}
		case *AgentState:
			if !agentDone[s.Target] {
				agentDone[s.Target] = true
				collectAgent(ctx, s, ch)
			}
		}
	}
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

// collectHub reads the Targets from the cache and what is in flight from
// the dispatch controller's record (no Dispatch is listed); a read that
// fails leaves its gauges out of this scrape rather than report zeros, as
// does a replica that keeps no record (not elected).
func (c *stateCollector) collectHub(ctx context.Context, h *HubState, flight *HubFlight, ch chan<- prometheus.Metric) {
	var targets v1alpha1.TargetList
	if h.Reader.List(ctx, &targets) != nil {
		return
	}
	var clk clock.PassiveClock = clock.RealClock{}
	if h.Clock != nil {
		clk = h.Clock
	}
	now := clk.Now()
	var counts FlightCounts
	if flight != nil && flight.Counts != nil {
		counts = flight.Counts()
	}
	for _, t := range targets.Items {
		available := 0.0
		if apimeta.IsStatusConditionTrue(t.Status.Conditions, v1alpha1.TargetAvailable) {
			available = 1
		}
		gauge(ch, targetAvailableDesc, available, t.Name)
		awaiting := 0.0
		if c := apimeta.FindStatusCondition(t.Status.Conditions, v1alpha1.TargetAvailable); c != nil && c.Reason == v1alpha1.ReasonAwaitingAgent {
			awaiting = 1
		}
		gauge(ch, awaitingAgentDesc, awaiting, t.Name)
		if b, ok := c.beats.get(t.Name); ok {
			gauge(ch, lastHeartbeatDesc, float64(b.at.UnixMilli())/1e3, t.Name)
			gauge(ch, heartbeatAgeDesc, now.Sub(b.at).Seconds(), t.Name)
			gauge(ch, lostAfterDesc, b.lostAfter.Seconds(), t.Name)
		}
		if counts.InFlight != nil {
			gauge(ch, inFlightDesc, float64(counts.InFlight[t.Name]), t.Name)
			gauge(ch, queuedDesc, float64(counts.Queued[t.Name]), t.Name)
			if n, ok := counts.QueueLimit[t.Name]; ok {
				gauge(ch, queueLimitDesc, float64(n), t.Name)
			}
		}
	}
	if counts.InFlight != nil {
		collectQueue(targets.Items, counts.Waiting, now, ch)
	}
}

// collectQueue counts the waiting line under the Targets serving each
// job's flavors: the dispatch controller's record, so a scrape lists no
// Workload however many wait.
func collectQueue(targets []v1alpha1.Target, line []WaitingJob, now time.Time, ch chan<- prometheus.Metric) {
	depth, oldest := map[string]int{}, map[string]time.Time{}
	for _, t := range targets {
		depth[t.Name] = 0
	}
	for _, w := range line {
		serving := []string{}
		for _, t := range targets {
			if t.Serves(w.Flavors, w.QueueFlavors) {
				serving = append(serving, t.Name)
			}
		}
		if len(serving) == 0 {
			serving = append(serving, "")
		}
		for _, t := range serving {
			depth[t]++
			if o, ok := oldest[t]; !ok || w.Since.Before(o) {
				oldest[t] = w.Since
			}
		}
	}
	for t, n := range depth {
		gauge(ch, queueDepthDesc, float64(n), t)
		if n > 0 {
			gauge(ch, oldestWaitDesc, now.Sub(oldest[t]).Seconds(), t)
		}
	}
}

// agentPhases are the phases agent_dispatches always reports, zeros included.
var agentPhases = []v1alpha1.DispatchPhase{v1alpha1.DispatchPending, v1alpha1.DispatchSubmitted, v1alpha1.DispatchRunning,
	v1alpha1.DispatchSucceeded, v1alpha1.DispatchFailed, v1alpha1.DispatchCancelled, v1alpha1.DispatchRejected}

// collectAgent counts the agent's Dispatches by phase. It only reads them,
// so it takes the cache's own objects rather than a deep copy of every one
// on each scrape (finished Dispatches stay until their TrainJob goes).
func collectAgent(ctx context.Context, a *AgentState, ch chan<- prometheus.Metric) {
	var list v1alpha1.DispatchList
	if a.Reader.List(ctx, &list, client.InNamespace(a.Namespace), client.UnsafeDisableDeepCopy) != nil {
		return
	}
	n := map[v1alpha1.DispatchPhase]int{}
	for _, d := range list.Items {
		if d.Spec.TargetName != a.Target {
			continue
		}
		phase := d.Status.Phase
		if phase == "" {
			phase = v1alpha1.DispatchPending
		}
		n[phase]++
	}
	for _, p := range agentPhases {
		gauge(ch, agentPhaseDesc, float64(n[p]), a.Target, string(p))
	}
}

package spoke

import "sync"

// CapacityReadings numbers the heartbeat's capacity readings, so the
// agent can tell the hub from which reading on a Dispatch's running work
// is counted in the Target's free resources (Dispatch
// status.countedFromReading): a reading that starts after the agent saw
// the work running counts it. Comparing the heartbeat's time with the
// work's start time instead mixes clocks (agent, slurmctld, kubelet) and
// second-granular timestamps, and a job could be counted twice or not at
// all.
type CapacityReadings struct {
	mu      sync.Mutex
	started int64
	// synced: the count continues the Target's persisted one, so numbers
	// handed out never go below what a Dispatch already recorded.
	synced bool
}

// begin numbers a reading about to start, continuing from persisted (the
// Target's status.capacityReading; known false when the Target could not
// be read). ok is false while the count has never continued the Target's:
// that reading's number means nothing to the hub and is not published.
func (c *CapacityReadings) begin(persisted int64, known bool) (n int64, ok bool) {
	if c == nil {
		return 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if known {
		c.started = max(c.started, persisted)
		c.synced = true
	}
	c.started++
	return c.started, c.synced
}

// NextCounting is the first reading that counts work the caller saw
// running before the call: the next one to start. 0 until the first
// reading continued the Target's count (the hub then falls back to
// times), and on a nil receiver.
func (c *CapacityReadings) NextCounting() int64 {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.synced {
		return 0
	}
	return c.started + 1
}

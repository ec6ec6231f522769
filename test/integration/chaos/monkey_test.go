package chaos

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"time"
)

// monkey kills a random running process (a hub or agent replica) with
// SIGKILL every 1–3 s and starts it again after a random delay: most delays
// are short (a supervisor restarting a crashed pod), longDownShare of them
// outlast the lease, never the fence deadline. A killed leader's successor
// waits out the election lock, so even a short kill of one leaves its
// target without renewals for up to the lock's duration. At most two
// processes are down at once, sometimes both replicas of one. It also
// restarts a process that exited by itself, as a supervisor would (the
// test fails on such exits).
type monkey struct {
	rng *rand.Rand

	mu       sync.Mutex
	kills    map[string]int
	long     map[string]int
	down     map[string]bool
	done     bool
	stopped  bool
	restarts sync.WaitGroup
	// timeline of kills: offset from start, process, time down.
	start    time.Time
	timeline []string
}

func newMonkey(rng *rand.Rand) *monkey {
	return &monkey{rng: rng, kills: map[string]int{}, long: map[string]int{}, down: map[string]bool{}, start: time.Now()}
}

// run kills until maxKills, or minKills once the burst is done; then it
// waits for every restart.
func (m *monkey) run(ctx context.Context) {
	defer func() {
		m.restarts.Wait()
		m.mu.Lock()
		m.stopped = true
		m.mu.Unlock()
	}()
	for {
		gap := time.Second + time.Duration(m.rng.Int63n(int64(2*time.Second)))
		select {
		case <-ctx.Done():
			return
		case <-time.After(gap):
		}
		m.mu.Lock()
		total, done := m.totalLocked(), m.done
		var up []string
		for _, name := range env.names {
			if m.down[name] {
				continue
			}
			if !env.procs[name].Running() {
				_ = env.procs[name].Start() // exited by itself: a supervisor restarts it
			}
			up = append(up, name)
		}
		m.mu.Unlock()
		if total >= maxKills || (total >= minKills && done) {
			return
		}
		if len(up) <= len(env.names)-2 {
			continue
		}
		name := up[m.rng.Intn(len(up))]
		delay := 200*time.Millisecond + time.Duration(m.rng.Int63n(int64(2800*time.Millisecond)))
		long := m.rng.Float64() < longDownShare
		if long {
			delay = leaseDuration + time.Second + time.Duration(m.rng.Int63n(int64(longDownMax-leaseDuration-time.Second)))
		}
		if !env.procs[name].Kill() {
			continue
		}
		m.mu.Lock()
		m.kills[name]++
		if long {
			m.long[name]++
		}
		m.down[name] = true
		m.timeline = append(m.timeline, fmt.Sprintf("+%.1fs %s down %.1fs", time.Since(m.start).Seconds(),
			strings.TrimPrefix(name, "agent-"), delay.Seconds()))
		m.mu.Unlock()
		m.restarts.Add(1)
		go m.restart(ctx, name, delay)
	}
}

// restart starts name again after delay.
func (m *monkey) restart(ctx context.Context, name string, delay time.Duration) {
	defer m.restarts.Done()
	select {
	case <-ctx.Done():
	case <-time.After(delay):
	}
	for env.procs[name].Start() != nil && ctx.Err() == nil {
		time.Sleep(200 * time.Millisecond)
	}
	m.mu.Lock()
	m.down[name] = false
	m.mu.Unlock()
}

func (m *monkey) setDone(done bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.done = done
}

// finished reports whether the monkey stopped and every process runs.
func (m *monkey) finished() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stopped
}

func (m *monkey) total() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.totalLocked()
}

func (m *monkey) totalLocked() int {
	n := 0
	for _, k := range m.kills {
		n += k
	}
	return n
}

// describe lists kills per process, with how many outlasted the lease.
func (m *monkey) describe() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var parts []string
	for _, name := range env.names {
		parts = append(parts, fmt.Sprintf("%s %d, %d long", name, m.kills[name], m.long[name]))
	}
	return strings.Join(parts, "; ") + ")\n  kills: " + strings.Join(m.timeline, ", ")
}

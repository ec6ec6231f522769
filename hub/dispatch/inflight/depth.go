package inflight

import (
	"math"
	"time"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// A target that takes queued jobs (a Slurm cluster with a queue depth)
// starts the next one the moment a job ends, but only while its own queue
// holds one. The hub refills that queue a refill time later: the agent's
// poll sees the queued job start, its status write reaches the hub, the
// hub places the next job and the agent submits it. A fixed depth empties
// whenever more jobs start within a refill time than it holds (short jobs,
// or a wave of jobs that began together and end together), and the
// cluster then idles for the rest of that refill time.
//
// So the depth adapts: the hub keeps at least spec.slurm.queueDepth queued,
// and as many as started on the target within any refillMargin refill
// times of the last startHistory, measured on the hub's own watch, up to
// the GPUs of the target (one turnover of the whole cluster at one GPU a
// job). The peak, not the latest window: jobs that started together end
// together one run time later, and a queue sized to the quiet moment in
// between holds too few for that wave. Once none of the hub's jobs is left
// on the target, its past starts are forgotten (Forget). A depth of 0
// turns queueing off, adaptive depth included.

// refillMargin: the queue covers the starts of this many refill times, for
// the step no measurement covers (a woken job's wait in the controller's
// queue) and for bursts.
const refillMargin = 2

// startHistory is how long a peak of starts holds the queue deep: waves
// of short jobs, whose refill is a large part of their run, come back
// within it; for longer jobs a refill's idle time hardly counts.
const startHistory = 5 * time.Minute

// refillWeight is the weight of each new sample in the moving averages of
// the refill time's two parts.
const refillWeight = 0.2

// depthGauge is what one target's adaptive depth reads: when jobs started
// there, as the hub's watch first showed them running, and the two parts
// of a refill time as the watch times them: a booking until the agent
// reports the job submitted (the hub's writes, the agent's pick-up and
// submit), and the remote start until the hub sees it running (the
// agent's poll and status write).
type depthGauge struct {
	starts          []time.Time
	toSubmit, toRun time.Duration
}

// refill is the target's refill time as measured so far.
func (g *depthGauge) refill() time.Duration { return g.toSubmit + g.toRun }

// maxRefillSample bounds one measurement: a part longer than this is an
// outage or a clock skew between the hub and the remote system, not the
// pace of a refill.
const maxRefillSample = time.Minute

// sample folds one measurement into a moving average.
func sample(avg *time.Duration, d time.Duration) {
	if d < 0 || d > maxRefillSample {
		return
	}
	if *avg == 0 {
		*avg = d
		return
	}
	*avg += time.Duration(refillWeight * float64(d-*avg))
}

// gaugeLocked is target's gauge, made when first needed. The caller
// holds mu.
func (f *Record) gaugeLocked(target string) *depthGauge {
	g := f.gauges[target]
	if g == nil {
		g = &depthGauge{}
		f.gauges[target] = g
	}
	return g
}

// timeRefillLocked measures the refill time's parts from what the watch
// shows of a Dispatch to t (fl) after prev (seen: the record held it
// before), and records a start. It reports whether the Dispatch started
// now. Targets that take no queued jobs are not timed. The caller holds mu.
func (f *Record) timeRefillLocked(t *v1alpha1.Target, prev flight, seen bool, fl flight, now time.Time) bool {
	if !seen || t == nil || t.QueueDepth() == 0 {
		return false
	}
	target := t.Name
	g := f.gaugeLocked(target)
	unsubmitted := prev.booked || prev.d.Status.Phase == "" || prev.d.Status.Phase == v1alpha1.DispatchPending
	if unsubmitted && !prev.at.IsZero() && fl.d.Status.Phase != v1alpha1.DispatchPending && fl.d.Status.Phase != "" {
		sample(&g.toSubmit, now.Sub(prev.at))
	}
	if prev.started() || !fl.started() {
		return false
	}
	if st := fl.d.Status.StartTime; st != nil {
		// Slurm's start times are whole seconds: the mean evens it out.
		sample(&g.toRun, now.Sub(st.Time))
	}
	g.trim(now)
	g.starts = append(g.starts, now)
	return true
}

// trim forgets the starts too old to count.
func (g *depthGauge) trim(now time.Time) {
	i := 0
	for i < len(g.starts) && now.Sub(g.starts[i]) > startHistory {
		i++
	}
	g.starts = g.starts[i:]
}

// depthLocked is t's queue depth now: its spec's, or deeper when jobs
// started there faster than the hub refills its queue in the last
// startHistory. The caller holds mu.
func (f *Record) depthLocked(t *v1alpha1.Target, now time.Time) int32 {
	base := t.QueueDepth()
	g := f.gauges[t.Name]
	if base == 0 || g == nil {
		return base
	}
	g.trim(now)
	n := peakStarts(g.starts, refillMargin*g.refill())
	limit := int64(math.MaxInt32)
	if q, ok := t.Status.Capacity[v1alpha1.GPUResource]; ok {
		limit = q.Value()
	}
	return int32(max(int64(base), min(int64(n), limit)))
}

// peakStarts is the most starts (in time order) within any window of
// that length.
func peakStarts(starts []time.Time, window time.Duration) int {
	peak, from := 0, 0
	for to := range starts {
		for starts[to].Sub(starts[from]) > window {
			from++
		}
		peak = max(peak, to-from+1)
	}
	return peak
}

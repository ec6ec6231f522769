package statusapi

import (
	"sync"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
)

// Each job's processes may post DefaultReportRate reports a second, in
// bursts of DefaultReportBurst (all ranks reporting the same step); past
// that a report is answered 429 with Retry-After, as the Kubernetes API
// server answers a client over its limits (Trainer v2.3's own server has no
// limit and would pass its API server's refusals on as 500). Well above the
// one report per DefaultInterval the agent writes, the cap only bounds what
// a runaway job costs the agent (parsing, validation, TokenReviews).
const (
	DefaultReportRate  = 1.0
	DefaultReportBurst = 10
)

// DefaultInterval is the least time between two writes of one Dispatch's
// progress to the hub: at 10,000 running jobs at most about 333 Dispatch
// status writes per second, however often the processes report.
const DefaultInterval = 30 * time.Second

// Reports keeps the latest validated report of each Dispatch the agent runs
// until the agent writes it to the hub. It holds one entry per Dispatch
// that reported, dropped when the Dispatch ends or goes (Forget).
type Reports struct {
	// Interval paces the writes of each Dispatch's report (DefaultInterval).
	Interval time.Duration

	// Rate (reports a second) and Burst cap what each Dispatch's
	// processes may post (DefaultReportRate, DefaultReportBurst).
	Rate  float64
	Burst int

	mu     sync.Mutex
	latest map[types.UID]*trainer.TrainerStatus
	// written is when each Dispatch's report was last taken for a write.
	written map[types.UID]time.Time
	// buckets hold each Dispatch's reports left to post.
	buckets map[types.UID]bucket
}

// bucket is a token bucket: tokens left at at.
type bucket struct {
	tokens float64
	at     time.Time
}

// NewReports returns an empty store pacing writes by interval (0: default).
func NewReports(interval time.Duration) *Reports {
	if interval <= 0 {
		interval = DefaultInterval
	}
	return &Reports{Interval: interval, Rate: DefaultReportRate, Burst: DefaultReportBurst,
		latest: map[types.UID]*trainer.TrainerStatus{}, written: map[types.UID]time.Time{}, buckets: map[types.UID]bucket{}}
}

// Allow takes one report of the Dispatch uid from its budget at now, or
// says how long until the next one may be posted.
func (r *Reports) Allow(uid types.UID, now time.Time) (bool, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.buckets[uid]
	if !ok {
		b = bucket{tokens: float64(max(r.Burst, 1)), at: now}
	}
	wait := b.take(now, r.Rate, r.Burst)
	r.buckets[uid] = b
	return wait == 0, wait
}

// take takes one token at now from a bucket refilled at rate a second up
// to burst, or says how long until one is there (0: taken).
func (b *bucket) take(now time.Time, rate float64, burst int) time.Duration {
	if now.After(b.at) {
		b.tokens = min(float64(max(burst, 1)), b.tokens+now.Sub(b.at).Seconds()*rate)
		b.at = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return 0
	}
	if rate <= 0 {
		return time.Hour
	}
	return max(time.Duration((1-b.tokens)/rate*float64(time.Second)), time.Nanosecond)
}

// Put records ts as the latest report of the Dispatch uid.
func (r *Reports) Put(uid types.UID, ts *trainer.TrainerStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.latest[uid] = ts.DeepCopy()
}

// Due returns the Dispatch's latest report when one is waiting and the
// last write of its report is at least Interval ago, or when force (the
// work has just ended: no later write would carry it). The caller writes it
// and calls Written.
func (r *Reports) Due(uid types.UID, now time.Time, force bool) *trainer.TrainerStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	ts, ok := r.latest[uid]
	if !ok || (!force && now.Sub(r.written[uid]) < r.Interval) {
		return nil
	}
	return ts.DeepCopy()
}

// Written records that ts, taken from Due, is on the hub: it is no longer
// waiting unless a newer one came in since.
func (r *Reports) Written(uid types.UID, ts *trainer.TrainerStatus, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.written[uid] = now
	if cur, ok := r.latest[uid]; ok && equality.Semantic.DeepEqual(cur, ts) {
		delete(r.latest, uid)
	}
}

// Forget drops what is kept of the Dispatch uid.
func (r *Reports) Forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.latest, uid)
	delete(r.written, uid)
	delete(r.buckets, uid)
}

// Len is the number of Dispatches with something kept, for tests and
// bounds.
func (r *Reports) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return max(len(r.latest), len(r.written), len(r.buckets))
}

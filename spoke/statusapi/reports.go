package statusapi

import (
	"sync"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
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

	mu     sync.Mutex
	latest map[types.UID]*trainer.TrainerStatus
	// written is when each Dispatch's report was last taken for a write.
	written map[types.UID]time.Time
}

// NewReports returns an empty store pacing writes by interval (0: default).
func NewReports(interval time.Duration) *Reports {
	if interval <= 0 {
		interval = DefaultInterval
	}
	return &Reports{Interval: interval, latest: map[types.UID]*trainer.TrainerStatus{}, written: map[types.UID]time.Time{}}
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
}

// Len is the number of Dispatches with something kept, for tests and
// bounds.
func (r *Reports) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return max(len(r.latest), len(r.written))
}

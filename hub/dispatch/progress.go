package dispatch

import (
	"context"
	"sync"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	trainerac "github.com/kubeflow/trainer/v2/pkg/client/applyconfiguration/trainer/v1alpha1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/internal/metrics"
)

// ProgressFieldOwner is the field manager the hub writes a TrainJob's
// status.trainerStatus as. It is apart from FieldOwner so the two applies
// never drop each other's fields.
const ProgressFieldOwner = "trainyard-progress"

// MinProgressInterval is the least time between two writes of one TrainJob's
// status.trainerStatus. At 10,000 running jobs that report continuously the
// hub writes at most 10,000 / 30 s ≈ 333 TrainJob status applies per second
// for progress (and the agents as many Dispatch status writes); a job's
// progress on the hub is at most about a minute old (the agent's pacing,
// spoke.DefaultProgressInterval, plus this one).
const MinProgressInterval = 30 * time.Second

// progressPacer remembers when the hub last wrote each TrainJob's progress,
// for the time its cache has not yet seen that write. It keeps one entry per
// Workload, dropped with the Workload's tear-down or deletion.
type progressPacer struct {
	mu   sync.Mutex
	last map[types.NamespacedName]time.Time
}

func newProgressPacer() *progressPacer {
	return &progressPacer{last: map[types.NamespacedName]time.Time{}}
}

func (p *progressPacer) wrote(wl types.NamespacedName, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last[wl] = at
}

func (p *progressPacer) lastWrite(wl types.NamespacedName) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last[wl]
}

func (p *progressPacer) forget(wl types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.last, wl)
}

// progressWriteTime is when the API server last recorded a change by the
// hub's progress apply on tj: its managed-fields entry's time, which
// survives a restart of the hub.
func progressWriteTime(tj *trainer.TrainJob) time.Time {
	for _, mf := range tj.ManagedFields {
		if mf.Manager == ProgressFieldOwner && mf.Subresource == "status" && mf.Time != nil {
			return mf.Time.Time
		}
	}
	return time.Time{}
}

// progressAction is what relayProgress does for one TrainJob.
type progressAction int

const (
	progressKeep  progressAction = iota // nothing to write
	progressWrite                       // apply d's report
	progressClear                       // drop an older attempt's report
	progressWait                        // a new report, written too recently
)

// decideProgress compares the live Dispatch's report with the TrainJob's.
// Only the current attempt's report is ever written (d is the live
// Dispatch and its status must describe its attempt); a report the hub
// wrote before d existed belongs to an older attempt and is dropped. wait
// is how long a held-back write must wait.
func decideProgress(d *v1alpha1.Dispatch, tj *trainer.TrainJob, lastWrite, now time.Time) (progressAction, time.Duration) {
	report := d.Status.TrainerStatus
	if d.Status.ObservedAttempt != d.Spec.Attempt {
		report = nil
	}
	if report == nil {
		written := progressWriteTime(tj)
		if tj.Status.TrainerStatus != nil && !written.IsZero() && written.Before(d.CreationTimestamp.Time) {
			return progressClear, 0
		}
		return progressKeep, 0
	}
	if equality.Semantic.DeepEqual(report, tj.Status.TrainerStatus) {
		return progressKeep, 0
	}
	// The last report of finished work is written at once: no later one
	// follows that would carry it.
	if d.Status.Phase.IsFinal() {
		return progressWrite, 0
	}
	if w := progressWriteTime(tj); w.After(lastWrite) {
		lastWrite = w
	}
	if wait := lastWrite.Add(MinProgressInterval).Sub(now); wait > 0 {
		return progressWait, wait
	}
	return progressWrite, 0
}

// relayProgress writes the live Dispatch's progress report into the
// TrainJob's status.trainerStatus, at most once per MinProgressInterval per
// job. It returns how long to wait before a held-back report is due.
func (r *Reconciler) relayProgress(ctx context.Context, s *state, tj *trainer.TrainJob) (time.Duration, error) {
	d, wl := s.live, client.ObjectKeyFromObject(s.wl)
	now := r.clock.Now()
	action, wait := decideProgress(d, tj, r.progress.lastWrite(wl), now)
	switch action {
	case progressWait:
		return wait, nil
	case progressKeep:
		return 0, nil
	}
	st := trainerac.TrainJobStatus()
	if action == progressWrite {
		st.WithTrainerStatus(trainerStatusApply(d.Status.TrainerStatus))
	}
	// An apply without trainerStatus removes it, as the field's only owner.
	apply := trainerac.TrainJob(tj.Name, tj.Namespace).WithUID(tj.UID).WithStatus(st)
	if err := r.client.Status().Apply(ctx, apply, client.FieldOwner(ProgressFieldOwner), client.ForceOwnership); err != nil {
		return 0, client.IgnoreNotFound(err)
	}
	r.progress.wrote(wl, now)
	return 0, nil
}

func trainerStatusApply(ts *trainer.TrainerStatus) *trainerac.TrainerStatusApplyConfiguration {
	a := trainerac.TrainerStatus().WithLastUpdatedTime(ts.LastUpdatedTime)
	if ts.ProgressPercentage != nil {
		a.WithProgressPercentage(*ts.ProgressPercentage)
	}
	if ts.EstimatedRemainingSeconds != nil {
		a.WithEstimatedRemainingSeconds(*ts.EstimatedRemainingSeconds)
	}
	for _, m := range ts.Metrics {
		a.WithMetrics(trainerac.Metric().WithName(m.Name).WithValue(m.Value))
	}
	return a
}

// noteProgress keeps the job's progress gauges (metrics.ObserveProgress):
// a series while the live attempt runs and has reported, none otherwise
// (not running, being torn down, requeued, or silent in this attempt), so
// an alert on the last report's age sees only running jobs that use
// Trainer's status API.
func noteProgress(wl types.NamespacedName, s *state, tearingDown bool) {
	d := s.live
	if tearingDown || d == nil || d.Status.Phase != v1alpha1.DispatchRunning ||
		d.Status.ObservedAttempt != d.Spec.Attempt || d.Status.TrainerStatus == nil {
		metrics.ForgetProgress(wl.String())
		return
	}
	ts := d.Status.TrainerStatus
	metrics.ObserveProgress(wl.String(), metrics.Progress{Namespace: d.Spec.Workload.Namespace, TrainJob: d.Spec.TrainJob.Name,
		Target: d.Spec.TargetName, Percent: ts.ProgressPercentage, LastReport: ts.LastUpdatedTime.Time})
}

package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The progress gauges have one series per running TrainJob whose training
// processes have reported through Trainer's status API at least once (a
// job whose code never calls the API has none, so it never looks stalled).
// The hub's dispatch controller, on the elected replica only, records each
// from the live Dispatch and forgets it when the job stops running, is
// requeued or is deleted: at most two series per running job (20,000 at
// 10,000 running jobs), none for finished work. The labels are the hub
// TrainJob's namespace and name (trainjob_namespace, so the scrape's own
// namespace label stays the hub's) and its target.

// Progress is the latest report of one running TrainJob.
type Progress struct {
	Namespace, TrainJob, Target string
	// Percent is the reported progressPercentage (nil: not reported).
	Percent *int32
	// LastReport is the report's lastUpdatedTime: when the training
	// process last reported.
	LastReport time.Time
}

type progressSet struct {
	mu sync.Mutex
	m  map[string]Progress
}

var progress = progressSet{m: map[string]Progress{}}

// ObserveProgress records the latest report of the running job of the
// Workload key (namespace/name), replacing what was recorded for it.
func ObserveProgress(key string, p Progress) {
	progress.mu.Lock()
	defer progress.mu.Unlock()
	progress.m[key] = p
}

// ForgetProgress drops the job of the Workload key from the gauges: it is
// no longer running, or has not reported in its current attempt.
func ForgetProgress(key string) {
	progress.mu.Lock()
	defer progress.mu.Unlock()
	delete(progress.m, key)
}

func (s *progressSet) snapshot() []Progress {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Progress, 0, len(s.m))
	for _, p := range s.m {
		out = append(out, p)
	}
	return out
}

var (
	progressLabels  = []string{"trainjob_namespace", "trainjob", "target"}
	progressPctDesc = desc("trainjob_progress_percent",
		"progressPercentage a running TrainJob last reported through Trainer's status API.", progressLabels...)
	lastReportDesc = desc("trainjob_progress_last_report_timestamp_seconds",
		"Unix time of a running TrainJob's last report through Trainer's status API (its lastUpdatedTime); "+
			"only jobs that reported at least once in their current attempt. Alert on time() minus it.", progressLabels...)
)

type progressCollector struct{ set *progressSet }

func (c progressCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- progressPctDesc
	ch <- lastReportDesc
}

func (c progressCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.set.snapshot() {
		if p.Percent != nil {
			gauge(ch, progressPctDesc, float64(*p.Percent), p.Namespace, p.TrainJob, p.Target)
		}
		gauge(ch, lastReportDesc, float64(p.LastReport.UnixMilli())/1e3, p.Namespace, p.TrainJob, p.Target)
	}
}

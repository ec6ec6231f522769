package dashboard

import (
	"cmp"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/hubview"
)

// JobRow is one line of the job list.
type JobRow struct {
	Namespace, Name, Queue, Target, Phase, Age string
	Attempt                                    int32
	// Progress and ETA are the `trainyard jobs` columns.
	Progress, ETA string
	// TargetFromCondition is true when no Dispatch could be read and the
	// target comes from the TrainJob's conditions.
	TargetFromCondition bool
}

// JobFilter narrows the job list; an empty field matches everything.
type JobFilter struct {
	Namespace, Queue, Target, Phase string
}

// filterFrom reads a filter from the query string.
func filterFrom(q url.Values) JobFilter {
	return JobFilter{Namespace: q.Get("namespace"), Queue: q.Get("queue"), Target: q.Get("target"), Phase: q.Get("phase")}
}

func (f JobFilter) matches(r JobRow) bool {
	return (f.Namespace == "" || f.Namespace == r.Namespace) && (f.Queue == "" || f.Queue == r.Queue) &&
		(f.Target == "" || f.Target == r.Target) && (f.Phase == "" || f.Phase == r.Phase)
}

// JobsView is the job list with its filter and the values each filter can
// take.
type JobsView struct {
	Filter                              JobFilter
	Rows                                []JobRow
	Total                               int
	Namespaces, Queues, Targets, Phases []string
}

// buildJobs makes the rows of jobs that f matches, newest first, and the
// choices of every filter from all jobs.
func buildJobs(jobs []hubview.JobInfo, f JobFilter, now time.Time) JobsView {
	v := JobsView{Filter: f, Total: len(jobs)}
	seen := map[*[]string]map[string]bool{&v.Namespaces: {}, &v.Queues: {}, &v.Targets: {}, &v.Phases: {}}
	add := func(list *[]string, s string) {
		if s != "" && !seen[list][s] {
			seen[list][s] = true
			*list = append(*list, s)
		}
	}
	sorted := slices.Clone(jobs)
	slices.SortStableFunc(sorted, func(a, b hubview.JobInfo) int {
		if c := b.Created.Compare(a.Created.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	for _, j := range sorted {
		r := jobRow(j, now)
		add(&v.Namespaces, r.Namespace)
		add(&v.Queues, r.Queue)
		add(&v.Targets, r.Target)
		add(&v.Phases, r.Phase)
		if f.matches(r) {
			v.Rows = append(v.Rows, r)
		}
	}
	for _, l := range []*[]string{&v.Namespaces, &v.Queues, &v.Targets, &v.Phases} {
		slices.Sort(*l)
	}
	return v
}

func jobRow(j hubview.JobInfo, now time.Time) JobRow {
	return JobRow{
		Namespace: j.Namespace, Name: j.Name, Queue: j.Queue, Target: jobTarget(j), Phase: j.Phase,
		Age: age(now, j.Created), Attempt: j.Attempt, TargetFromCondition: j.Target == "" && jobTarget(j) != "",
		Progress: hubview.ProgressCell(j.Progress, j.Phase, now), ETA: hubview.ETACell(j.Progress, j.Phase, now),
	}
}

// onTarget finds the target in the messages the hub writes into a
// TrainJob's conditions: "... created on target spoke-1 (attempt 2)".
var onTarget = regexp.MustCompile(`\bon target (\S+) \(attempt \d+\)`)

// jobTarget is the live Dispatch's target or, for a user who may not read
// Dispatches, the one the TrainJob's conditions name (Created, Running,
// Complete, Failed: the hub writes them all "on target X (attempt N)").
func jobTarget(j hubview.JobInfo) string {
	if j.Target != "" {
		return j.Target
	}
	for _, t := range []string{v1alpha1.TrainJobCreated, v1alpha1.TrainJobRunning, trainer.TrainJobComplete, trainer.TrainJobFailed} {
		if c := apimeta.FindStatusCondition(j.Conditions, t); c != nil {
			if m := onTarget.FindStringSubmatch(c.Message); m != nil {
				return m[1]
			}
		}
	}
	return ""
}

// age is how long ago t was, as kubectl prints it.
func age(now time.Time, t metav1.Time) string {
	if t.IsZero() {
		return "?"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

// JobView is the job page: the description `trainyard describe` prints.
type JobView struct {
	*hubview.Description
	Now time.Time
	// Progress is nil for a job that never reported.
	Progress *ProgressView
}

// placementText prints where a pod set went: "2 pods × 4 GPUs in
// rack=rack-a (2)".
func placementText(p v1alpha1.PodSetPlacement) string {
	s := fmt.Sprintf("%d pods", p.Count)
	if p.GPUsPerPod > 0 {
		s += fmt.Sprintf(" × %d GPUs", p.GPUsPerPod)
	}
	if p.Topology == nil {
		return s + " anywhere on the target"
	}
	var ds []string
	for _, d := range p.Topology.Domains {
		var kv []string
		for i, v := range d.Values {
			kv = append(kv, shortLevel(p.Topology.Levels[min(i, len(p.Topology.Levels)-1)])+"="+v)
		}
		ds = append(ds, fmt.Sprintf("%s (%d)", strings.Join(kv, ","), d.Count))
	}
	return s + " in " + strings.Join(ds, "; ")
}

// shortLevel drops a label key's prefix: "topology.kubernetes.io/rack" is
// "rack".
func shortLevel(l string) string {
	if i := strings.LastIndexByte(l, '/'); i >= 0 {
		return l[i+1:]
	}
	return l
}

package dashboard

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/hubview"
)

// jobsFixture: llama runs on spoke-1, sim failed on hpc (known from its
// condition only), mnist waits in another queue and namespace.
func jobsFixture() []hubview.JobInfo {
	llama := job("llama", "spoke-1", "Running", nil)
	llama.Created = metav1.Time{Time: now.Add(-2 * time.Hour)}
	llama.Progress = &hubview.ProgressSummary{Percent: ptr.To[int32](42), RemainingSeconds: ptr.To[int32](600), Reported: metav1.Time{Time: now.Add(-time.Minute)}}
	sim := hubview.JobInfo{JobSummary: hubview.JobSummary{Namespace: "team-b", Name: "sim", Queue: "hpc-lq", Phase: "Finished",
		Created: metav1.Time{Time: now.Add(-time.Hour)}}, Conditions: []metav1.Condition{
		{Type: "Failed", Status: metav1.ConditionTrue, Message: "Failed on target hpc (attempt 1): Slurm job 42 exited with 3"}}}
	mnist := job("mnist", "", "Pending", nil)
	mnist.Namespace, mnist.Created = "team-c", metav1.Time{Time: now.Add(-time.Minute)}
	return []hubview.JobInfo{llama, sim, mnist}
}

func TestJobRows(t *testing.T) {
	llama := JobRow{Namespace: "team-a", Name: "llama", Queue: "lq", Target: "spoke-1", Phase: "Running", Age: "120m", Attempt: 1, Progress: "42%", ETA: "9m"}
	sim := JobRow{Namespace: "team-b", Name: "sim", Queue: "hpc-lq", Target: "hpc", Phase: "Finished", Age: "60m", TargetFromCondition: true, Progress: "-", ETA: "-"}
	mnist := JobRow{Namespace: "team-c", Name: "mnist", Queue: "lq", Phase: "Pending", Age: "60s", Attempt: 1, Progress: "-", ETA: "-"}
	cases := map[string]struct {
		filter JobFilter
		want   []JobRow
	}{
		"all, newest first":     {want: []JobRow{mnist, sim, llama}},
		"by namespace":          {filter: JobFilter{Namespace: "team-b"}, want: []JobRow{sim}},
		"by queue":              {filter: JobFilter{Queue: "lq"}, want: []JobRow{mnist, llama}},
		"by condition's target": {filter: JobFilter{Target: "hpc"}, want: []JobRow{sim}},
		"by phase and target":   {filter: JobFilter{Target: "spoke-1", Phase: "Running"}, want: []JobRow{llama}},
		"nothing matches":       {filter: JobFilter{Target: "spoke-1", Phase: "Pending"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := buildJobs(jobsFixture(), tc.filter, now)
			if diff := cmp.Diff(tc.want, got.Rows); diff != "" {
				t.Errorf("rows (-want +got):\n%s", diff)
			}
			// The choices come from all jobs, whatever the filter.
			choices := [][]string{got.Namespaces, got.Queues, got.Targets, got.Phases}
			want := [][]string{{"team-a", "team-b", "team-c"}, {"hpc-lq", "lq"}, {"hpc", "spoke-1"}, {"Finished", "Pending", "Running"}}
			if diff := cmp.Diff(want, choices); diff != "" || got.Total != 3 {
				t.Errorf("choices (-want +got):\n%s; total %d", diff, got.Total)
			}
		})
	}
}

func TestJobTarget(t *testing.T) {
	cond := func(typ, msg string) []metav1.Condition {
		return []metav1.Condition{{Type: typ, Status: metav1.ConditionTrue, Message: msg}}
	}
	cases := map[string]struct {
		job  hubview.JobInfo
		want string
	}{
		"live Dispatch wins": {job: hubview.JobInfo{JobSummary: hubview.JobSummary{Target: "spoke-2"},
			Conditions: cond("Created", "JobSet x/y created on target spoke-1 (attempt 1)")}, want: "spoke-2"},
		"Created condition":  {job: hubview.JobInfo{Conditions: cond("Created", "JobSet trainyard-jobs/ty-llama-2 created on target spoke-1 (attempt 2)")}, want: "spoke-1"},
		"Complete condition": {job: hubview.JobInfo{Conditions: cond("Complete", "completed on target hpc (attempt 1)")}, want: "hpc"},
		"unrelated message":  {job: hubview.JobInfo{Conditions: cond("Created", "waiting on target selection")}},
		"other condition":    {job: hubview.JobInfo{Conditions: cond("Suspended", "running on target hpc (attempt 1)")}},
		"nothing":            {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := jobTarget(tc.job); got != tc.want {
				t.Errorf("jobTarget = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPlacementText(t *testing.T) {
	cases := map[string]struct {
		p    v1alpha1.PodSetPlacement
		want string
	}{
		"anywhere": {p: v1alpha1.PodSetPlacement{Count: 2}, want: "2 pods anywhere on the target"},
		"in a rack": {p: v1alpha1.PodSetPlacement{Count: 2, GPUsPerPod: 4, Topology: inRack([]string{"rack-a"})},
			want: "2 pods × 4 GPUs in rack=rack-a (1)"},
		"on nodes": {p: v1alpha1.PodSetPlacement{Count: 2, Topology: inRack([]string{"rack-a", "n1"}, []string{"rack-a", "n2"})},
			want: "2 pods in rack=rack-a,hostname=n1 (1); rack=rack-a,hostname=n2 (1)"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := placementText(tc.p); got != tc.want {
				t.Errorf("placementText = %q, want %q", got, tc.want)
			}
		})
	}
}

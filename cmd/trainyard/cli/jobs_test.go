package cli

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

func trainJob(name string, conds ...string) *trainer.TrainJob {
	tj := tytesting.MakeTrainJob(name, "team-a").Queue("lq").Obj()
	tj.UID = types.UID("tj-" + name)
	tj.CreationTimestamp = ago(10 * time.Minute)
	for _, c := range conds {
		apimeta.SetStatusCondition(&tj.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue, Reason: c})
	}
	return tj
}

// workloadOf returns tj's Workload with the given attempt annotation ("" for
// none) and True conditions.
func workloadOf(tj *trainer.TrainJob, attempt string, conds ...string) kueue.Workload {
	wl := kueue.Workload{ObjectMeta: metav1.ObjectMeta{
		Name: "trainjob-" + tj.Name, Namespace: tj.Namespace, UID: types.UID("wl-" + tj.Name),
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: trainer.GroupVersion.String(), Kind: trainer.TrainJobKind, Name: tj.Name, UID: tj.UID, Controller: ptr.To(true),
		}},
	}}
	if attempt != "" {
		wl.Annotations = map[string]string{v1alpha1.AnnotationAttempt: attempt}
	}
	for _, c := range conds {
		apimeta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue, Reason: c})
	}
	return wl
}

func dispatchOf(wl kueue.Workload, attempt int32, target string, phase v1alpha1.DispatchPhase) *tytesting.DispatchWrapper {
	return tytesting.MakeDispatch(string(wl.UID)+"-"+target, "trainyard-"+target, target).
		WorkloadUID(wl.UID).Attempt(attempt).Phase(phase)
}

func TestJobState(t *testing.T) {
	tj := trainJob("a")
	cases := map[string]struct {
		tj         *trainer.TrainJob
		wls        []kueue.Workload
		dispatches []v1alpha1.Dispatch
		want       JobSummary
	}{
		"no workload yet: Pending": {
			tj:   tj,
			want: JobSummary{Phase: StatePending},
		},
		"quota reserved, no dispatch: Pending": {
			tj:   tj,
			wls:  []kueue.Workload{workloadOf(tj, "", kueue.WorkloadQuotaReserved)},
			want: JobSummary{Workload: "trainjob-a", Phase: StatePending},
		},
		"admitted, no dispatch: Admitted": {
			tj:   tj,
			wls:  []kueue.Workload{workloadOf(tj, "", kueue.WorkloadQuotaReserved, kueue.WorkloadAdmitted)},
			want: JobSummary{Workload: "trainjob-a", Phase: StateAdmitted},
		},
		"workload finished, no dispatch: Finished": {
			tj:   tj,
			wls:  []kueue.Workload{workloadOf(tj, "1", kueue.WorkloadFinished)},
			want: JobSummary{Workload: "trainjob-a", Phase: StateFinished},
		},
		"train job failed without a workload: Finished": {
			tj:   trainJob("a", trainer.TrainJobFailed),
			want: JobSummary{Phase: StateFinished},
		},
		"dispatch of the current attempt": {
			tj:  tj,
			wls: []kueue.Workload{workloadOf(tj, "2", kueue.WorkloadAdmitted)},
			dispatches: []v1alpha1.Dispatch{
				*dispatchOf(workloadOf(tj, ""), 2, "spoke-2", v1alpha1.DispatchRunning).
					Remote(&v1alpha1.RemoteRef{Kind: "JobSet", Namespace: "trainyard-jobs", Name: "ty-a-2"}).Obj(),
				*dispatchOf(workloadOf(tj, ""), 1, "spoke-1", v1alpha1.DispatchFailed).Obj(),
			},
			want: JobSummary{Workload: "trainjob-a", Target: "spoke-2", Attempt: 2, Phase: "Running",
				Remote: &v1alpha1.RemoteRef{Kind: "JobSet", Namespace: "trainyard-jobs", Name: "ty-a-2"}},
		},
		"a dispatch without a phase is Pending": {
			tj:         tj,
			wls:        []kueue.Workload{workloadOf(tj, "1", kueue.WorkloadQuotaReserved)},
			dispatches: []v1alpha1.Dispatch{*dispatchOf(workloadOf(tj, ""), 1, "spoke-1", "").Obj()},
			want:       JobSummary{Workload: "trainjob-a", Target: "spoke-1", Attempt: 1, Phase: "Pending"},
		},
		"a dispatch being deleted is not live": {
			tj:  tj,
			wls: []kueue.Workload{workloadOf(tj, "1", kueue.WorkloadQuotaReserved)},
			dispatches: []v1alpha1.Dispatch{*dispatchOf(workloadOf(tj, ""), 1, "spoke-1", v1alpha1.DispatchRunning).
				Finalizers(v1alpha1.RemoteCleanupFinalizer).DeletionTimestamp(now).Obj()},
			want: JobSummary{Workload: "trainjob-a", Phase: StatePending},
		},
		"an older attempt than the workload's is not live": {
			tj:         tj,
			wls:        []kueue.Workload{workloadOf(tj, "2", kueue.WorkloadQuotaReserved)},
			dispatches: []v1alpha1.Dispatch{*dispatchOf(workloadOf(tj, ""), 1, "spoke-1", v1alpha1.DispatchFailed).Obj()},
			want:       JobSummary{Workload: "trainjob-a", Phase: StatePending},
		},
		"without the attempt annotation the latest attempt is live": {
			tj:  tj,
			wls: []kueue.Workload{workloadOf(tj, "", kueue.WorkloadFinished)},
			dispatches: []v1alpha1.Dispatch{
				*dispatchOf(workloadOf(tj, ""), 1, "spoke-1", v1alpha1.DispatchFailed).Obj(),
				*dispatchOf(workloadOf(tj, ""), 3, "hpc", v1alpha1.DispatchSucceeded).Obj(),
			},
			want: JobSummary{Workload: "trainjob-a", Target: "hpc", Attempt: 3, Phase: "Succeeded"},
		},
		"another job's workload and dispatch are not this job's": {
			tj:         tj,
			wls:        []kueue.Workload{workloadOf(trainJob("b"), "1", kueue.WorkloadAdmitted)},
			dispatches: []v1alpha1.Dispatch{*dispatchOf(workloadOf(trainJob("b"), ""), 1, "spoke-1", v1alpha1.DispatchRunning).Obj()},
			want:       JobSummary{Phase: StatePending},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := summarize(newHubIndex(tc.wls, tc.dispatches).state(tc.tj))
			want := tc.want
			want.Namespace, want.Name, want.Queue, want.Created = "team-a", "a", "lq", tc.tj.CreationTimestamp
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("summary (-want +got):\n%s", diff)
			}
		})
	}
}

func testJobs() []JobSummary {
	return []JobSummary{
		{Namespace: "team-a", Name: "llama", Queue: "lq", Workload: "trainjob-llama", Target: "spoke-1", Attempt: 2, Phase: "Running",
			Remote: &v1alpha1.RemoteRef{Kind: "JobSet", Namespace: "trainyard-jobs", Name: "ty-llama-2"}, Created: ago(90 * time.Minute),
			Progress: &ProgressSummary{Percent: ptr.To[int32](42), RemainingSeconds: ptr.To[int32](3600), Reported: ago(30 * time.Second)}},
		{Namespace: "team-a", Name: "mnist", Queue: "lq", Phase: StatePending, Created: ago(40 * time.Second)},
		{Namespace: "team-b", Name: "sim", Queue: "hpc", Workload: "trainjob-sim", Target: "hpc", Attempt: 1, Phase: "Failed",
			Remote: &v1alpha1.RemoteRef{Kind: "SlurmJob", Name: "ty-sim-1", ID: "42"}, Created: ago(26 * time.Hour),
			Progress: &ProgressSummary{Percent: ptr.To[int32](80), RemainingSeconds: ptr.To[int32](600), Reported: ago(25 * time.Hour)}},
	}
}

func TestPrintJobs(t *testing.T) {
	cases := map[string]struct {
		format string
		jobs   []JobSummary
		scope  printScope
		want   string
	}{
		"table in one namespace": {
			jobs:  testJobs()[:2],
			scope: printScope{namespace: "team-a"},
			want: lines(
				"NAME      QUEUE     TARGET    PHASE     PROGRESS   ETA       AGE",
				"llama     lq        spoke-1   Running   42%        59m       90m",
				"mnist     lq        <none>    Pending   -          -         40s",
			),
		},
		"all namespaces, wide": {
			format: outputWide,
			jobs:   testJobs(),
			scope:  printScope{all: true},
			want: lines(
				"NAMESPACE   NAME      QUEUE     TARGET    PHASE     PROGRESS   ETA       AGE       ATTEMPT   REMOTE",
				"team-a      llama     lq        spoke-1   Running   42%        59m       90m       2         JobSet trainyard-jobs/ty-llama-2",
				"team-a      mnist     lq        <none>    Pending   -          -         40s       <none>    <none>",
				"team-b      sim       hpc       hpc       Failed    80%        -         26h       1         SlurmJob ty-sim-1 (id 42)",
			),
		},
		"name": {
			format: outputName,
			jobs:   testJobs()[:2],
			want:   lines("trainjob.trainer.kubeflow.org/llama", "trainjob.trainer.kubeflow.org/mnist"),
		},
		"none in the namespace": {
			scope: printScope{namespace: "team-c"},
			want:  lines("No TrainJobs found in team-c namespace."),
		},
		"none anywhere": {
			scope: printScope{all: true},
			want:  lines("No TrainJobs found."),
		},
		"yaml of one named job is its summary": {
			format: outputYAML,
			jobs:   testJobs()[2:],
			scope:  printScope{single: true},
			want: lines(
				"attempt: 1",
				`created: "2026-12-01T08:00:00Z"`,
				"name: sim",
				"namespace: team-b",
				"phase: Failed",
				"progress:",
				"  percent: 80",
				`  remainingSeconds: 600`,
				`  reported: "2026-12-01T09:00:00Z"`,
				"queue: hpc",
				"remote:",
				`  id: "42"`,
				"  kind: SlurmJob",
				"  name: ty-sim-1",
				"target: hpc",
				"workload: trainjob-sim",
			),
		},
		"json of several jobs is a List": {
			format: outputJSON,
			jobs:   testJobs()[1:2],
			want: lines(
				"{",
				`    "apiVersion": "v1",`,
				`    "kind": "List",`,
				`    "items": [`,
				`        {`,
				`            "namespace": "team-a",`,
				`            "name": "mnist",`,
				`            "queue": "lq",`,
				`            "phase": "Pending",`,
				`            "created": "2026-12-02T09:59:20Z"`,
				`        }`,
				`    ]`,
				"}",
			),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			if err := printJobs(&out, tc.format, tc.jobs, tc.scope, now); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, out.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
}

func TestProgressCells(t *testing.T) {
	report := func(pct, left int32, old time.Duration) *ProgressSummary {
		return &ProgressSummary{Percent: ptr.To(pct), RemainingSeconds: ptr.To(left), Reported: ago(old)}
	}
	cases := map[string]struct {
		p             *ProgressSummary
		phase         string
		progress, eta string
	}{
		"no report":                  {phase: "Running", progress: "-", eta: "-"},
		"a fresh report":             {p: report(42, 3600, 30*time.Second), phase: "Running", progress: "42%", eta: "59m"},
		"the estimate counts down":   {p: report(42, 3600, 9*time.Minute), phase: "Running", progress: "42%", eta: "51m"},
		"an estimate that ran out":   {p: report(99, 60, 5*time.Minute), phase: "Running", progress: "99%", eta: "any moment"},
		"no percentage, an estimate": {p: &ProgressSummary{RemainingSeconds: ptr.To[int32](7200), Reported: ago(0)}, phase: "Running", progress: "-", eta: "120m"},
		"a stale report":             {p: report(42, 3600, 12*time.Minute), phase: "Running", progress: "42% (stale 12m)", eta: "-"},
		"stale while admitted (a tenant sees no Dispatch)": {p: report(42, 3600, 3*time.Hour), phase: StateAdmitted, progress: "42% (stale 3h)", eta: "-"},
		"finished: old is not stale, no ETA":               {p: report(100, 0, 3*time.Hour), phase: "Succeeded", progress: "100%", eta: "-"},
		"finished per Kueue":                               {p: report(70, 900, 3*time.Hour), phase: StateFinished, progress: "70%", eta: "-"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := []string{ProgressCell(tc.p, tc.phase, now), ETACell(tc.p, tc.phase, now)}
			if diff := cmp.Diff([]string{tc.progress, tc.eta}, got); diff != "" {
				t.Errorf("PROGRESS, ETA (-want +got):\n%s", diff)
			}
		})
	}
}

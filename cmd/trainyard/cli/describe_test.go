package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/hubview"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// trainJob is a queued TrainJob of team-a made 10 minutes ago.
func trainJob(name string) *trainer.TrainJob {
	tj := tytesting.MakeTrainJob(name, "team-a").Queue("lq").Obj()
	tj.CreationTimestamp = ago(10 * time.Minute)
	return tj
}

// workloadOf is tj's Workload, as Kueue names it.
func workloadOf(tj *trainer.TrainJob) *kueue.Workload {
	return &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Name: "trainjob-" + tj.Name, Namespace: tj.Namespace, UID: types.UID("wl-" + tj.Name)}}
}

// dispatchOf is the Dispatch of wl's attempt to target.
func dispatchOf(wl *kueue.Workload, attempt int32, target string, phase v1alpha1.DispatchPhase) *tytesting.DispatchWrapper {
	return tytesting.MakeDispatch(string(wl.UID)+"-"+target, "trainyard-"+target, target).WorkloadUID(wl.UID).Attempt(attempt).Phase(phase)
}

// runningState is a job admitted by Kueue and running on spoke-1 in its
// second attempt; the first attempt's Dispatch is still being deleted.
func runningState() hubview.Job {
	tj := trainJob("llama")
	tj.Annotations = map[string]string{"trainyard.dev/runtime-source": "ClusterTrainingRuntime/torch-distributed",
		"trainyard.dev/runtime-hash": "sha256:3f2a" + strings.Repeat("0", 60)}
	tj.Spec.RuntimeRef = trainer.RuntimeRef{Name: "torch-distributed", Kind: ptr.To(trainer.ClusterTrainingRuntimeKind)}
	tj.Status.Conditions = []metav1.Condition{{
		Type: "Running", Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonRemoteRunning,
		Message: "running on target spoke-1 (attempt 2)", LastTransitionTime: ago(2 * time.Minute),
	}}
	wl := workloadOf(tj)
	wl.Status.Conditions = []metav1.Condition{
		{Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionTrue, Reason: "QuotaReserved", Message: "Quota reserved in ClusterQueue team-a", LastTransitionTime: ago(4 * time.Minute)},
		{Type: kueue.WorkloadAdmitted, Status: metav1.ConditionTrue, Reason: "Admitted", Message: "The workload is admitted", LastTransitionTime: ago(3 * time.Minute)},
	}
	wl.Status.Admission = &kueue.Admission{ClusterQueue: "team-a", PodSetAssignments: []kueue.PodSetAssignment{{
		Name: "node", Count: ptr.To[int32](2), Flavors: map[corev1.ResourceName]kueue.ResourceFlavorReference{"nvidia.com/gpu": "h100"},
	}}}
	wl.Status.AdmissionChecks = []kueue.AdmissionCheckState{
		{Name: "gpu-dispatch", State: kueue.CheckStateReady, Message: "running on target spoke-1 (attempt 2) as JobSet trainyard-jobs/ty-llama-2", LastTransitionTime: ago(3 * time.Minute)},
		{Name: "budget", State: kueue.CheckStateReady, LastTransitionTime: ago(4 * time.Minute)},
	}
	old := dispatchOf(wl, 1, "spoke-2", v1alpha1.DispatchRunning).Finalizers(v1alpha1.RemoteCleanupFinalizer).DeletionTimestamp(now).Obj()
	live := dispatchOf(wl, 2, "spoke-1", v1alpha1.DispatchRunning).
		SnapshotRuntime(v1alpha1.RuntimeKindClusterTrainingRuntime, "torch-distributed", tytesting.TorchRuntimeSpec(2)).
		PodSets(v1alpha1.PodSetPlacement{Name: "node", Count: 2, Flavors: map[string]string{"nvidia.com/gpu": "h100"},
			Topology: &v1alpha1.TopologyAssignment{Levels: []string{"rack", "kubernetes.io/hostname"}, Domains: []v1alpha1.TopologyDomainAssignment{
				{Values: []string{"rack-a", "n1"}, Count: 1}, {Values: []string{"rack-a", "n2"}, Count: 1},
			}}}).
		Remote(&v1alpha1.RemoteRef{Kind: "JobSet", Namespace: "trainyard-jobs", Name: "ty-llama-2"}).Obj()
	live.Status.Reason = v1alpha1.ReasonRemoteRunning
	live.Status.StartTime = ptrTime(ago(2 * time.Minute))
	s := hubview.Job{TrainJob: tj, Workload: wl, Dispatches: []v1alpha1.Dispatch{*old, *live}}
	s.Live = &s.Dispatches[1]
	return s
}

// failedSlurmState is a job that failed on a Slurm target with exit code 3.
func failedSlurmState() hubview.Job {
	tj := trainJob("sim")
	tj.Status.Conditions = []metav1.Condition{{Type: trainer.TrainJobFailed, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonRemoteFailed,
		Message: "Failed on target hpc (attempt 1): Slurm job 42 exited with 3", LastTransitionTime: ago(time.Minute)}}
	wl := workloadOf(tj)
	d := dispatchOf(wl, 1, "hpc", v1alpha1.DispatchFailed).
		Remote(&v1alpha1.RemoteRef{Kind: "SlurmJob", Name: "ty-sim-1", ID: "42"}).Obj()
	d.Status.Reason, d.Status.Message, d.Status.ExitCode = v1alpha1.ReasonRemoteFailed, "Slurm job 42 exited with 3", ptr.To[int32](3)
	d.Status.StartTime, d.Status.CompletionTime = ptrTime(ago(5*time.Minute)), ptrTime(ago(time.Minute))
	s := hubview.Job{TrainJob: tj, Workload: wl, Dispatches: []v1alpha1.Dispatch{*d}}
	s.Live = &s.Dispatches[0]
	return s
}

func describeEvents() []hubview.EventInfo {
	return []hubview.EventInfo{
		{Object: "Workload/trainjob-llama", Type: "Warning", Reason: "Requeued", From: "trainyard-hub", Last: ago(5 * time.Minute), Message: "target spoke-2 lost: no heartbeat since 09:54"},
		{Object: "TrainJob/llama", Type: "Normal", Reason: "Created", Count: 2, Last: ago(3 * time.Minute), Message: "attempt 2 to target spoke-1\n"},
	}
}

func TestPrintDescription(t *testing.T) {
	cases := map[string]struct {
		state  hubview.Job
		events []hubview.EventInfo
		want   string
	}{
		"running, with a second attempt and events": {
			state:  runningState(),
			events: describeEvents(),
			want: lines(
				"Name:        llama",
				"Namespace:   team-a",
				"Queue:       lq",
				"Runtime:     ClusterTrainingRuntime/torch-distributed (pinned as TrainingRuntime/torch-distributed-3f2a00000000)",
				"Created:     10m ago (2026-12-02T09:50:00Z)",
				"Phase:       Running",
				"Conditions:",
				"  Type      Status    Reason          Age       Message",
				"  ----      ------    ------          ---       -------",
				"  Running   True      RemoteRunning   2m        running on target spoke-1 (attempt 2)",
				"Progress:          <none> (the job's processes have not reported progress)",
				"Workload:          trainjob-llama",
				"  Cluster Queue:   team-a",
				"  Conditions:",
				"    Type            Status    Reason          Age       Message",
				"    ----            ------    ------          ---       -------",
				"    QuotaReserved   True      QuotaReserved   4m        Quota reserved in ClusterQueue team-a",
				"    Admitted        True      Admitted        3m        The workload is admitted",
				"  Admission:",
				"    Pod Set   Count     Flavors",
				"    -------   -----     -------",
				"    node      2         nvidia.com/gpu=h100",
				"  Admission Checks:",
				"    Name                       State     Age       Message",
				"    ----                       -----     ---       -------",
				"    gpu-dispatch (trainyard)   Ready     3m        running on target spoke-1 (attempt 2) as JobSet trainyard-jobs/ty-llama-2",
				"    budget                     Ready     4m        <none>",
				"Placement:",
				"  Target:      spoke-1",
				"  Attempt:     2",
				"  Dispatch:    trainyard-spoke-1/wl-llama-spoke-1",
				"  Phase:       Running (RemoteRunning)",
				"  Remote:      JobSet trainyard-jobs/ty-llama-2",
				"  Exit Code:   <none>",
				"  Started:     2m ago (2026-12-02T09:58:00Z)",
				"  Completed:   <none>",
				"  Runtime Snapshot:",
				"    Kind:   ClusterTrainingRuntime",
				"    Name:   torch-distributed",
				"    Hash:   "+runningState().Live.Spec.Runtime.Hash,
				"  Pod Sets:",
				"    Name   Count     Flavors               Topology",
				"    ----   -----     -------               --------",
				"    node   2         nvidia.com/gpu=h100   rack/kubernetes.io/hostname: rack-a/n1=1, rack-a/n2=1",
				"Attempts:",
				"  Attempt   Target    Phase     Dispatch                             State",
				"  -------   ------    -----     --------                             -----",
				"  1         spoke-2   Running   trainyard-spoke-2/wl-llama-spoke-2   deleting",
				"  2         spoke-1   Running   trainyard-spoke-1/wl-llama-spoke-1   live",
				"Events:",
				"  Type      Reason     Age       From            Object                    Message",
				"  ----      ------     ---       ----            ------                    -------",
				"  Warning   Requeued   5m        trainyard-hub   Workload/trainjob-llama   target spoke-2 lost: no heartbeat since 09:54",
				"  Normal    Created    3m (x2)   <none>          TrainJob/llama            attempt 2 to target spoke-1",
			),
		},
		"failed on Slurm with an exit code": {
			state: failedSlurmState(),
			want: lines(
				"Name:        sim",
				"Namespace:   team-a",
				"Queue:       lq",
				"Runtime:     ClusterTrainingRuntime/torch-distributed",
				"Created:     10m ago (2026-12-02T09:50:00Z)",
				"Phase:       Failed",
				"Conditions:",
				"  Type     Status    Reason         Age       Message",
				"  ----     ------    ------         ---       -------",
				"  Failed   True      RemoteFailed   60s       Failed on target hpc (attempt 1): Slurm job 42 exited with 3",
				"Progress:             <none> (the job's processes have not reported progress)",
				"Workload:             trainjob-sim",
				"  Cluster Queue:      <none>",
				"  Conditions:         <none>",
				"  Admission Checks:   <none>",
				"Placement:",
				"  Target:      hpc",
				"  Attempt:     1",
				"  Dispatch:    trainyard-hpc/wl-sim-hpc",
				"  Phase:       Failed (RemoteFailed)",
				"  Message:     Slurm job 42 exited with 3",
				"  Remote:      SlurmJob ty-sim-1 (id 42)",
				"  Exit Code:   3",
				"  Started:     5m ago (2026-12-02T09:55:00Z)",
				"  Completed:   60s ago (2026-12-02T09:59:00Z)",
				"  Runtime Snapshot:",
				"    Kind:   ClusterTrainingRuntime",
				"    Name:   torch-distributed",
				"    Hash:   sha256:0000000000000000000000000000000000000000000000000000000000000000",
				"  Pod Sets:",
				"    Name   Count     Flavors   Topology",
				"    ----   -----     -------   --------",
				"    node   2         <none>    anywhere on the target",
				"Attempts:",
				"  Attempt   Target    Phase     Dispatch                   State",
				"  -------   ------    -----     --------                   -----",
				"  1         hpc       Failed    trainyard-hpc/wl-sim-hpc   live",
				"Events:   <none>",
			),
		},
		"not yet seen by Kueue": {
			state: hubview.Job{TrainJob: trainJob("new")},
			want: lines(
				"Name:         new",
				"Namespace:    team-a",
				"Queue:        lq",
				"Runtime:      ClusterTrainingRuntime/torch-distributed",
				"Created:      10m ago (2026-12-02T09:50:00Z)",
				"Phase:        Pending",
				"Conditions:   <none>",
				"Progress:     <none> (the job's processes have not reported progress)",
				"Workload:     <none> (Kueue has not made one: is the queue label set and the LocalQueue there?)",
				"Placement:    <none> (no live Dispatch)",
				"Events:       <none>",
			),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := tc.state.Describe(map[kueue.AdmissionCheckReference]bool{"gpu-dispatch": true})
			d.Events = tc.events
			var out bytes.Buffer
			if err := printDescription(&out, d, now); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, out.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPrintSummaryWhenDispatchesAreHidden(t *testing.T) {
	sum := &v1alpha1.PlacementSummary{Target: "spoke-1", Attempt: 2, Phase: v1alpha1.DispatchRunning, Remote: "JobSet jobs/ty-llama-2",
		PodSets: []v1alpha1.PodSetSummary{{Name: "node", Count: 70, Domains: []string{"rack-a/n1=1"}, MoreDomains: 69}}}
	cases := map[string]struct {
		sum  *v1alpha1.PlacementSummary
		want []string
	}{
		"no summary yet": {want: []string{"Placement:    <none> (no summary on the TrainJob yet; hub summary; full Dispatch detail is for administrators)"}},
		"summary": {sum: sum, want: []string{
			"Placement (hub summary; full Dispatch detail is for administrators):", "  Target:      spoke-1", "  Attempt:     2",
			"  Phase:       Running", "  Remote:      JobSet jobs/ty-llama-2", "    node   70        rack-a/n1=1 and 69 more",
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := hubview.Job{TrainJob: trainJob("new")}.Describe(nil)
			d.DispatchesHidden, d.Summary = true, tc.sum
			var out bytes.Buffer
			if err := printDescription(&out, d, now); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w+"\n") {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			if strings.Contains(out.String(), "Dispatch:") || strings.Contains(out.String(), "Runtime Snapshot") {
				t.Errorf("output shows Dispatch detail:\n%s", out.String())
			}
		})
	}
}

func TestPrintProgress(t *testing.T) {
	report := func(old time.Duration, metrics ...trainer.Metric) *trainer.TrainerStatus {
		return &trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](42), EstimatedRemainingSeconds: ptr.To[int32](3600),
			LastUpdatedTime: ago(old), Metrics: metrics}
	}
	history := &v1alpha1.ProgressHistory{StepSeconds: 60, Metrics: []string{"loss"}, Points: []v1alpha1.ProgressPoint{
		{Time: ago(20 * time.Minute), Values: []string{"2.5"}}, {Time: ago(10 * time.Minute), Values: []string{"1.2"}}}}
	cases := map[string]struct {
		ts      *trainer.TrainerStatus
		history *v1alpha1.ProgressHistory
		phase   string
		want    string
	}{
		"no report": {
			phase: "Running",
			want:  lines("Progress:   <none> (the job's processes have not reported progress)"),
		},
		"a fresh report with metrics and history": {
			ts:      report(time.Minute, trainer.Metric{Name: "loss", Value: "0.31"}, trainer.Metric{Name: "eval_accuracy", Value: "0.87"}),
			history: history, phase: "Running",
			want: lines(
				"Progress:        42%, ETA 59m",
				"  Last Report:   60s ago (2026-12-02T09:59:00Z)",
				"  Metrics:",
				"    Name            Value",
				"    ----            -----",
				"    loss            0.31",
				"    eval_accuracy   0.87",
				"  History:   2 points from 20m ago (2026-12-02T09:40:00Z), at least 60s apart (the dashboard draws them)",
			),
		},
		"a stale report": {
			ts: report(25 * time.Minute), phase: hubview.StateAdmitted,
			want: lines(
				"Progress:        42%",
				"  Last Report:   25m ago (2026-12-02T09:35:00Z) (stale: no report for over 10m while the job runs)",
				"  Metrics:       <none>",
			),
		},
		"finished long ago: not stale": {
			ts: report(5 * time.Hour), phase: "Succeeded",
			want: lines(
				"Progress:        42%",
				"  Last Report:   5h ago (2026-12-02T05:00:00Z)",
				"  Metrics:       <none>",
			),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			tw := newTable(&out)
			describer{w: tw, now: now}.progress(tc.ts, tc.history, tc.phase)
			if err := tw.Flush(); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, out.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
}

package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueuetesting "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/admissioncheck"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// The hub the test writes:
//   - Targets spoke-1 (Kubernetes, fresh heartbeat, 12 of 16 GPUs free on
//     two racks) and hpc (Slurm, heartbeat stale).
//   - team-a/llama: admitted, attempt 2 running on spoke-1 as a JobSet;
//     attempt 1's Dispatch on hpc is still being deleted. Events on the
//     TrainJob and its Workload. It reported 42% with two metrics, and its
//     progress history holds llamaHistoryPoints points (on the Dispatch,
//     and on the TrainJob as the hub copies it for tenants).
//   - team-a/mnist: queued, Kueue made no Workload yet.
//   - team-b/sim: failed on hpc as Slurm job 42 with exit code 3.
const (
	checkName = "gpu-dispatch"
	gpuFlavor = "h100"
)

func seed(ctx context.Context, c client.Client) error {
	for _, ns := range []string{"team-a", "team-b", "trainyard-spoke-1", "trainyard-hpc"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
	}
	if err := seedTargets(ctx, c); err != nil {
		return err
	}
	ac := kueuetesting.MakeAdmissionCheck(checkName).ControllerName(admissioncheck.ControllerName).Obj()
	if err := c.Create(ctx, ac); err != nil {
		return err
	}
	if _, err := createTrainJob(ctx, c, "mnist", "team-a", "lq"); err != nil {
		return err
	}
	if err := seedLlama(ctx, c); err != nil {
		return err
	}
	return seedSim(ctx, c)
}

func seedTargets(ctx context.Context, c client.Client) error {
	spoke := tytesting.MakeKubernetesTarget("spoke-1", gpuFlavor).Obj()
	hpc := tytesting.MakeSlurmTarget("hpc", gpuFlavor, "gpu").Obj()
	for _, t := range []*v1alpha1.Target{spoke, hpc} {
		if err := c.Create(ctx, t); err != nil {
			return err
		}
	}
	gpus := corev1.ResourceList{v1alpha1.GPUResource: resource.MustParse("16")}
	spoke.Status = v1alpha1.TargetStatus{
		LastHeartbeatTime: &metav1.Time{Time: time.Now()}, Capacity: gpus, FreeGPUs: 12,
		Topology: &v1alpha1.TopologyStatus{Levels: []string{"topology.kubernetes.io/rack", "kubernetes.io/hostname"}, Domains: []v1alpha1.TopologyDomain{
			{Values: []string{"rack-a"}, Nodes: []string{"n1", "n2"}, FreeGPUsPerNode: []int32{8, 4}},
			{Values: []string{"rack-b"}, Nodes: []string{"n3", "n4"}, FreeGPUsPerNode: []int32{0, 0}},
		}},
	}
	setCondition(&spoke.Status.Conditions, v1alpha1.TargetAvailable, metav1.ConditionTrue, v1alpha1.ReasonHeartbeatFresh, "agent reports on time")
	hpc.Status = v1alpha1.TargetStatus{LastHeartbeatTime: &metav1.Time{Time: time.Now().Add(-10 * time.Minute)}, Capacity: gpus}
	setCondition(&hpc.Status.Conditions, v1alpha1.TargetAvailable, metav1.ConditionFalse, v1alpha1.ReasonHeartbeatStale, "no heartbeat for 10m")
	for _, t := range []*v1alpha1.Target{spoke, hpc} {
		if err := c.Status().Update(ctx, t); err != nil {
			return err
		}
	}
	return nil
}

func seedLlama(ctx context.Context, c client.Client) error {
	tj, err := createTrainJob(ctx, c, "llama", "team-a", "lq")
	if err != nil {
		return err
	}
	setCondition(&tj.Status.Conditions, "Running", metav1.ConditionTrue, v1alpha1.ReasonRemoteRunning, "running on target spoke-1 (attempt 2)")
	history, report := llamaProgress(time.Now())
	tj.Status.TrainerStatus = report
	if err := c.Status().Update(ctx, tj); err != nil {
		return err
	}
	raw, err := json.Marshal(history)
	if err != nil {
		return err
	}
	patch := client.MergeFrom(tj.DeepCopy())
	metav1.SetMetaDataAnnotation(&tj.ObjectMeta, v1alpha1.AnnotationProgressHistory, string(raw))
	if err := c.Patch(ctx, tj, patch); err != nil {
		return err
	}
	wl, err := createWorkload(ctx, c, tj, "team-a", 2, kueue.CheckStateReady,
		"running on target spoke-1 (attempt 2) as JobSet trainyard-jobs/ty-llama-2", kueue.WorkloadQuotaReserved, kueue.WorkloadAdmitted)
	if err != nil {
		return err
	}
	old := dispatch(wl, tj, "hpc", 1).Finalizers(v1alpha1.RemoteCleanupFinalizer).Obj()
	if err := c.Create(ctx, old); err != nil {
		return err
	}
	if err := c.Delete(ctx, old); err != nil {
		return err
	}
	live := dispatch(wl, tj, "spoke-1", 2).PodSets(v1alpha1.PodSetPlacement{
		Name: "node", Count: 2, Flavors: map[string]string{v1alpha1.GPUResource: gpuFlavor},
		Topology: &v1alpha1.TopologyAssignment{Levels: []string{"topology.kubernetes.io/rack"}, Domains: []v1alpha1.TopologyDomainAssignment{{Values: []string{"rack-a"}, Count: 2}}},
	}).Obj()
	if err := c.Create(ctx, live); err != nil {
		return err
	}
	live.Status = v1alpha1.DispatchStatus{
		Phase: v1alpha1.DispatchRunning, Reason: v1alpha1.ReasonRemoteRunning, ObservedAttempt: 2,
		Remote:    &v1alpha1.RemoteRef{Kind: "JobSet", Namespace: "trainyard-jobs", Name: "ty-llama-2"},
		StartTime: &metav1.Time{Time: time.Now()}, TrainerStatus: report, ProgressHistory: history,
	}
	if err := c.Status().Update(ctx, live); err != nil {
		return err
	}
	if err := createEvent(ctx, c, "Workload", wl.Name, wl.UID, corev1.EventTypeNormal, "Dispatched", "attempt 2 to target spoke-1"); err != nil {
		return err
	}
	return createEvent(ctx, c, trainer.TrainJobKind, tj.Name, tj.UID, corev1.EventTypeWarning, "Requeued", "target hpc lost: no heartbeat")
}

// llamaHistoryPoints is the number of points in llama's seeded history;
// its latest report is newer, so each of its curves has one more.
const llamaHistoryPoints = 7

// llamaProgress is llama's history, a point a minute up to a minute before
// now with a falling loss, built as the agent builds it, and its latest
// report at now.
func llamaProgress(now time.Time) (*v1alpha1.ProgressHistory, *trainer.TrainerStatus) {
	var h *v1alpha1.ProgressHistory
	start := now.Add(-llamaHistoryPoints * time.Minute)
	for i := range llamaHistoryPoints {
		h, _ = v1alpha1.RecordProgress(h, &trainer.TrainerStatus{
			ProgressPercentage: ptr.To(int32(5 * i)), LastUpdatedTime: metav1.NewTime(start.Add(time.Duration(i) * time.Minute)),
			Metrics: []trainer.Metric{{Name: "loss", Value: fmt.Sprint(3.0 / float64(i+1))}, {Name: "eval_accuracy", Value: fmt.Sprint(0.1 * float64(i))}},
		}, false)
	}
	return h, &trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](42), EstimatedRemainingSeconds: ptr.To[int32](3600),
		LastUpdatedTime: metav1.NewTime(now), Metrics: []trainer.Metric{{Name: "loss", Value: "0.31"}, {Name: "eval_accuracy", Value: "0.87"}}}
}

func seedSim(ctx context.Context, c client.Client) error {
	tj, err := createTrainJob(ctx, c, "sim", "team-b", "hpc-lq")
	if err != nil {
		return err
	}
	setCondition(&tj.Status.Conditions, trainer.TrainJobFailed, metav1.ConditionTrue, v1alpha1.ReasonRemoteFailed, "Failed on target hpc (attempt 1): Slurm job 42 exited with 3")
	if err := c.Status().Update(ctx, tj); err != nil {
		return err
	}
	wl, err := createWorkload(ctx, c, tj, "team-b", 1, kueue.CheckStateReady,
		"running on target hpc (attempt 1) as SlurmJob ty-sim-1 (id 42)", kueue.WorkloadQuotaReserved, kueue.WorkloadAdmitted, kueue.WorkloadFinished)
	if err != nil {
		return err
	}
	d := dispatch(wl, tj, "hpc", 1).PodSets(v1alpha1.PodSetPlacement{
		Name: "node", Count: 2, Flavors: map[string]string{v1alpha1.GPUResource: gpuFlavor},
	}).Obj()
	if err := c.Create(ctx, d); err != nil {
		return err
	}
	d.Status = v1alpha1.DispatchStatus{
		Phase: v1alpha1.DispatchFailed, Reason: v1alpha1.ReasonRemoteFailed, Message: "Slurm job 42 exited with 3",
		Remote: &v1alpha1.RemoteRef{Kind: "SlurmJob", Name: "ty-sim-1", ID: "42"}, ExitCode: ptr.To[int32](3), ObservedAttempt: 1,
	}
	return c.Status().Update(ctx, d)
}

func createTrainJob(ctx context.Context, c client.Client, name, ns, queue string) (*trainer.TrainJob, error) {
	tj := tytesting.MakeTrainJob(name, ns).Queue(queue).NumNodes(2).GPUsPerNode(4).Obj()
	return tj, c.Create(ctx, tj)
}

// createWorkload writes the Workload Kueue would make for tj, admitted
// (conds True) with trainyard's check in state st.
func createWorkload(ctx context.Context, c client.Client, tj *trainer.TrainJob, ns string, attempt int, st kueue.CheckState, msg string, conds ...string) (*kueue.Workload, error) {
	wl := kueuetesting.MakeWorkload("trainjob-"+tj.Name+"-1a2b3", ns).
		Annotations(map[string]string{v1alpha1.AnnotationAttempt: fmt.Sprint(attempt)}).
		ControllerReference(trainer.GroupVersion.WithKind(trainer.TrainJobKind), tj.Name, string(tj.UID)).
		PodSets(*kueuetesting.MakePodSet("node", 2).Request(v1alpha1.GPUResource, "4").Obj()).Obj()
	if err := c.Create(ctx, wl); err != nil {
		return nil, err
	}
	wl.Status.Admission = kueuetesting.MakeAdmission(kueue.ClusterQueueReference("cq-" + ns)).PodSets(
		kueuetesting.MakePodSetAssignment("node").Assignment(v1alpha1.GPUResource, gpuFlavor, "8").Count(2).Obj()).Obj()
	for _, t := range conds {
		setCondition(&wl.Status.Conditions, t, metav1.ConditionTrue, t, t)
	}
	wl.Status.AdmissionChecks = []kueue.AdmissionCheckState{{
		Name: checkName, State: st, Message: msg, LastTransitionTime: metav1.Now(),
	}}
	return wl, c.Status().Update(ctx, wl)
}

// dispatch is the Dispatch the hub writes for one attempt of wl.
func dispatch(wl *kueue.Workload, tj *trainer.TrainJob, target string, attempt int32) *tytesting.DispatchWrapper {
	d := tytesting.MakeDispatch(fmt.Sprintf("%s-%d", tj.Name, attempt), "trainyard-"+target, target).
		Attempt(attempt).WorkloadUID(wl.UID).SnapshotTrainJob(tj).
		SnapshotRuntime(v1alpha1.RuntimeKindClusterTrainingRuntime, "torch-distributed", tytesting.TorchRuntimeSpec(2))
	d.Spec.Workload.Namespace, d.Spec.Workload.Name = wl.Namespace, wl.Name
	d.Labels = map[string]string{
		v1alpha1.LabelWorkloadUID: string(wl.UID), v1alpha1.LabelWorkloadNamespace: wl.Namespace,
		v1alpha1.LabelWorkloadName: wl.Name, v1alpha1.LabelTarget: target, v1alpha1.LabelAttempt: fmt.Sprint(attempt),
	}
	return d
}

func createEvent(ctx context.Context, c client.Client, kind, name string, uid types.UID, typ, reason, msg string) error {
	now := metav1.Now()
	ns := "team-a"
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: name + ".", Namespace: ns},
		InvolvedObject: corev1.ObjectReference{Kind: kind, Namespace: ns, Name: name, UID: uid},
		Type:           typ, Reason: reason, Message: msg, Count: 1,
		FirstTimestamp: now, LastTimestamp: now, Source: corev1.EventSource{Component: "trainyard-hub"},
	}
	return c.Create(ctx, ev)
}

func setCondition(conds *[]metav1.Condition, t string, st metav1.ConditionStatus, reason, msg string) {
	apimeta.SetStatusCondition(conds, metav1.Condition{Type: t, Status: st, Reason: reason, Message: msg})
}

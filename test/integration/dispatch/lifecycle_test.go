package dispatch

import (
	"context"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobset "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueuetesting "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/hub/admissioncheck"
	"github.com/trainyard-dev/trainyard/hub/snapshot"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

func trainJob(name, runtime string, nodes int32, gpus int64) *trainer.TrainJob {
	return tytesting.MakeTrainJob(name, tenant).Queue(queue).
		RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).NumNodes(nodes).GPUsPerNode(gpus).Obj()
}

// waitRunning waits until the TrainJob's current Dispatch reports Running
// and returns it with the Workload.
func waitRunning(t *testing.T, tj *trainer.TrainJob) (*kueue.Workload, v1alpha1.Dispatch) {
	t.Helper()
	g := NewWithT(t)
	wl := util.WorkloadOf(g, env.fleet.Hub.Client, tj)
	var d v1alpha1.Dispatch
	g.Eventually(func(g Gomega) {
		var live []v1alpha1.Dispatch
		for _, x := range dispatchesOf(g, wl) {
			if x.DeletionTimestamp.IsZero() {
				live = append(live, x)
			}
		}
		g.Expect(live).To(HaveLen(1))
		d = live[0]
		g.Expect(d.Status.Phase).To(Equal(v1alpha1.DispatchRunning), "dispatch %s: %s %s", d.Name, d.Status.Reason, d.Status.Message)
	}, util.Timeout, util.Interval).Should(Succeed())
	return wl, d
}

// TestTrainJobRunsAsJobSetOnSpoke: the whole path. Kueue admits the
// TrainJob, trainyard dispatches it, the agent renders a JobSet with
// Trainer's torch wiring, kwok runs its pods, and completion flows back to
// the TrainJob and the Workload.
func TestTrainJobRunsAsJobSetOnSpoke(t *testing.T) {
	g := NewWithT(t)
	ctx, c := context.Background(), env.fleet.Hub.Client
	makeRuntime(t, "torch-quick", "3s")
	tj := submit(t, trainJob("quick", "torch-quick", 2, 4))
	wl := util.WorkloadOf(g, env.fleet.Hub.Client, tj)

	var remote remoteJobSet
	g.Eventually(func(g Gomega) {
		rs := remoteJobSetsOf(t, tj)
		g.Expect(rs).To(HaveLen(1))
		remote = rs[0]
	}, util.Timeout, util.Interval).Should(Succeed())
	rj := remote.js.Spec.ReplicatedJobs[0]
	g.Expect(ptr.Deref(rj.Template.Spec.Parallelism, 0)).To(Equal(int32(2)))
	node := rj.Template.Spec.Template.Spec.Containers[0]
	g.Expect(envOf(node, "PET_NNODES")).To(Equal("2"))
	g.Expect(envOf(node, "PET_MASTER_ADDR")).To(HavePrefix(remote.js.Name + "-node-0-0."))
	g.Expect(envOf(node, "PET_MASTER_PORT")).To(Equal("29500"))
	g.Expect(envOf(node, "PET_NODE_RANK")).NotTo(Equal("<unset>"))
	g.Expect(envOf(node, "PET_NPROC_PER_NODE")).NotTo(Equal("<unset>"))
	gpus := node.Resources.Requests[corev1.ResourceName(v1alpha1.GPUResource)]
	g.Expect(gpus.Value()).To(Equal(int64(4)))
	g.Expect(remote.js.Labels).To(HaveKeyWithValue(v1alpha1.LabelWorkloadUID, string(wl.UID)))

	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tj), tj)).To(Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete)).To(BeTrue(), "conditions %v", tj.Status.Conditions)
	}, util.Timeout, util.Interval).Should(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(wl), wl)).To(Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadFinished)).To(BeTrue())
	}, util.Timeout, util.Interval).Should(Succeed())
	g.Expect(tj.Status.JobsStatus).To(ContainElement(HaveField("Name", "node")))
	g.Expect(apimeta.IsStatusConditionTrue(tj.Status.Conditions, v1alpha1.TrainJobCreated)).To(BeTrue())
	g.Expect(apimeta.IsStatusConditionTrue(tj.Status.Conditions, v1alpha1.TrainJobRunning)).To(BeFalse())

	ds := dispatchesOf(g, wl)
	g.Expect(ds).To(HaveLen(1))
	g.Expect(ds[0].Spec.TargetName).To(Equal(remote.spoke))
	g.Expect(ds[0].Spec.Attempt).To(Equal(int32(1)))
	g.Expect(ds[0].Status.Phase).To(Equal(v1alpha1.DispatchSucceeded))
	state, _ := checkState(wl)
	g.Expect(state).To(Equal(kueue.CheckStateReady))

	var spokeJS jobset.JobSet
	g.Expect(spokeNamed(remote.spoke).Client.Get(ctx, client.ObjectKeyFromObject(&remote.js), &spokeJS)).To(Succeed())
	g.Expect(apimeta.IsStatusConditionTrue(spokeJS.Status.Conditions, string(jobset.JobSetCompleted))).To(BeTrue())
}

// TestFailingJobFailsTrainJobWithReason: pods that exit 3 on the spoke make
// the hub TrainJob Failed with the remote's reason, the Dispatch carries the
// exit code, and Kueue finishes the Workload.
func TestFailingJobFailsTrainJobWithReason(t *testing.T) {
	g := NewWithT(t)
	ctx, c := context.Background(), env.fleet.Hub.Client
	rt := tytesting.MakeClusterTrainingRuntime("torch-fails").Toleration(kube.KwokToleration).
		PodAnnotation("kwok.trainyard.dev/run-for", "2s").PodAnnotation("kwok.trainyard.dev/exit-code", "3").Obj()
	// No pod retries: the first failure fails the JobSet.
	rt.Spec.Template.Spec.ReplicatedJobs[0].Template.Spec.BackoffLimit = ptr.To[int32](0)
	g.Expect(c.Create(ctx, rt)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(ctx, rt) })
	tj := submit(t, trainJob("fails", "torch-fails", 1, 1))
	wl := util.WorkloadOf(g, env.fleet.Hub.Client, tj)
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tj), tj)).To(Succeed())
		failed := apimeta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobFailed)
		g.Expect(failed).NotTo(BeNil(), "conditions %v", tj.Status.Conditions)
		g.Expect(failed.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(failed.Reason).To(Equal("FailedJobs"))
		g.Expect(failed.Message).To(ContainSubstring("Failed on target"))
	}, util.Timeout, util.Interval).Should(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(wl), wl)).To(Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadFinished)).To(BeTrue())
	}, util.Timeout, util.Interval).Should(Succeed())
	ds := dispatchesOf(g, wl)
	g.Expect(ds).To(HaveLen(1))
	g.Expect(ds[0].Status.Phase).To(Equal(v1alpha1.DispatchFailed))
	g.Expect(ds[0].Status.ExitCode).To(HaveValue(Equal(int32(3))))
}

// TestRuntimeEditsDoNotReachDispatchedJob: editing, then deleting, the
// runtime after dispatch changes nothing for the job: same snapshot hash,
// same remote JobSet, still running.
func TestRuntimeEditsDoNotReachDispatchedJob(t *testing.T) {
	g := NewWithT(t)
	ctx, c := context.Background(), env.fleet.Hub.Client
	rt := makeRuntime(t, "torch-editme", "10m")
	tj := submit(t, trainJob("snap", "torch-editme", 1, 4))
	wl, d := waitRunning(t, tj)
	hash := d.Spec.Runtime.Hash

	// The job was pinned at creation to an immutable copy of the runtime,
	// which is what Kueue and the Dispatch both read.
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tj), tj)).To(Succeed())
	g.Expect(tj.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationRuntimeSource, "ClusterTrainingRuntime/torch-editme"))
	g.Expect(tj.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationRuntimeHash, hash))
	// The user's runtimeRef stays as written; the annotations name the copy.
	g.Expect(tj.Spec.RuntimeRef.Name).To(Equal("torch-editme"))
	g.Expect(ptr.Deref(tj.Spec.RuntimeRef.Kind, trainer.ClusterTrainingRuntimeKind)).To(Equal(trainer.ClusterTrainingRuntimeKind))
	ref, err := snapshot.PinnedRef(tj)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d.Spec.Runtime.Name).To(Equal(ref.Name))
	var pinned trainer.TrainingRuntime
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: tenant, Name: ref.Name}, &pinned)).To(Succeed())
	pinned.Spec.MLPolicy.NumNodes = ptr.To[int32](7)
	err = c.Update(ctx, &pinned)
	g.Expect(err).To(MatchError(ContainSubstring("its spec cannot change")))

	remote := remoteJobSetsOf(t, tj)
	g.Expect(remote).To(HaveLen(1))
	image := remote[0].js.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0].Image

	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(rt), rt)).To(Succeed())
	rt.Spec.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0].Image = "registry.example/changed:latest"
	rt.Spec.MLPolicy.NumNodes = ptr.To[int32](3)
	g.Expect(c.Update(ctx, rt)).To(Succeed())
	g.Expect(c.Delete(ctx, rt)).To(Succeed())

	g.Consistently(func(g Gomega) {
		ds := dispatchesOf(g, wl)
		g.Expect(ds).To(HaveLen(1))
		g.Expect(ds[0].Spec.Runtime.Hash).To(Equal(hash))
		g.Expect(ds[0].Status.Phase).To(Equal(v1alpha1.DispatchRunning))
		rs := remoteJobSetsOf(t, tj)
		g.Expect(rs).To(HaveLen(1))
		g.Expect(rs[0].js.UID).To(Equal(remote[0].js.UID))
		g.Expect(rs[0].js.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0].Image).To(Equal(image))
		// Kueue's integration reads the pinned copy: no eviction for pod
		// sets that changed with the source.
		var now kueue.Workload
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(wl), &now)).To(Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(now.Status.Conditions, kueue.WorkloadEvicted)).To(BeFalse())
		g.Expect(apimeta.IsStatusConditionTrue(now.Status.Conditions, kueue.WorkloadAdmitted)).To(BeTrue())
	}, 4*time.Second, 500*time.Millisecond).Should(Succeed())
}

// TestTrainJobWithMissingRuntimeIsRefused: a queued TrainJob naming a
// runtime that does not exist is refused at creation with a clear message,
// instead of waiting forever.
func TestTrainJobWithMissingRuntimeIsRefused(t *testing.T) {
	err := env.fleet.Hub.Client.Create(context.Background(), trainJob("ghost", "no-such-runtime", 1, 1))
	NewWithT(t).Expect(err).To(MatchError(And(
		ContainSubstring("trainyard cannot pin the runtime"), ContainSubstring(`ClusterTrainingRuntime "no-such-runtime"`))))
}

// TestDeletingTrainJobRemovesRemoteWork: deleting a running TrainJob
// deletes the remote JobSet and its pods; the hub Workload is held by
// trainyard's finalizer until that is confirmed.
func TestDeletingTrainJobRemovesRemoteWork(t *testing.T) {
	g := NewWithT(t)
	ctx, c := context.Background(), env.fleet.Hub.Client
	makeRuntime(t, "torch-del", "10m")
	tj := submit(t, trainJob("del", "torch-del", 2, 2))
	wl, d := waitRunning(t, tj)
	spoke := spokeNamed(d.Spec.TargetName)
	g.Expect(wl.Finalizers).To(ContainElement(v1alpha1.WorkloadFinalizer))

	g.Expect(c.Delete(ctx, tj)).To(Succeed())
	g.Eventually(func() int { return len(remoteJobSetsOf(t, tj)) }, util.Timeout, util.Interval).Should(BeZero())
	g.Eventually(func(g Gomega) {
		var pods corev1.PodList
		g.Expect(spoke.Client.List(ctx, &pods, client.InNamespace(spokeNS),
			client.MatchingLabels{v1alpha1.LabelWorkloadUID: string(wl.UID)})).To(Succeed())
		g.Expect(pods.Items).To(BeEmpty())
		g.Expect(dispatchesOf(g, wl)).To(BeEmpty())
		err := c.Get(ctx, client.ObjectKeyFromObject(wl), wl)
		g.Expect(client.IgnoreNotFound(err)).To(Succeed())
		g.Expect(err).To(HaveOccurred(), "Workload still exists with finalizers %v", wl.Finalizers)
	}, util.Timeout, util.Interval).Should(Succeed())
}

// TestEvictionCancelsRemoteAndReleasesQuota: deactivating the Workload (as
// an administrator or Kueue's preemption would evict it) removes the remote
// work before Kueue releases the quota; reactivating dispatches attempt 2,
// whose remote work has a new name.
func TestEvictionCancelsRemoteAndReleasesQuota(t *testing.T) {
	g := NewWithT(t)
	ctx, c := context.Background(), env.fleet.Hub.Client
	makeRuntime(t, "torch-evict", "10m")
	tj := submit(t, trainJob("evict", "torch-evict", 1, 4))
	wl, first := waitRunning(t, tj)

	setActive(t, wl, false)
	g.Eventually(func(g Gomega) {
		g.Expect(remoteJobSetsOf(t, tj)).To(BeEmpty())
		g.Expect(dispatchesOf(g, wl)).To(BeEmpty())
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(wl), wl)).To(Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved)).To(BeFalse())
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tj), tj)).To(Succeed())
		g.Expect(ptr.Deref(tj.Spec.Suspend, false)).To(BeTrue())
		for _, js := range tj.Status.JobsStatus {
			g.Expect(ptr.Deref(js.Active, 0)).To(BeZero())
		}
	}, util.Timeout, util.Interval).Should(Succeed())

	setActive(t, wl, true)
	_, second := waitRunning(t, tj)
	g.Expect(second.Spec.Attempt).To(BeNumerically(">", first.Spec.Attempt))
	rs := remoteJobSetsOf(t, tj)
	g.Expect(rs).To(HaveLen(1))
	g.Expect(rs[0].js.Name).To(HaveSuffix("-a" + itoa(second.Spec.Attempt)))
}

func setActive(t *testing.T, wl *kueue.Workload, active bool) {
	t.Helper()
	ctx, c := context.Background(), env.fleet.Hub.Client
	NewWithT(t).Eventually(func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(wl), wl); err != nil {
			return err
		}
		wl.Spec.Active = ptr.To(active)
		return c.Update(ctx, wl)
	}, util.Timeout, util.Interval).Should(Succeed())
}

// TestNoTargetForFlavorIsRetriedWithMessage: a job admitted for a flavor no
// target serves is never dispatched, and says why.
func TestNoTargetForFlavorIsRetriedWithMessage(t *testing.T) {
	g := NewWithT(t)
	ctx, c := context.Background(), env.fleet.Hub.Client
	objs := []client.Object{
		kueuetesting.MakeResourceFlavor("nowhere").Obj(),
		kueuetesting.MakeClusterQueue("cq-nowhere").
			ResourceGroup(*kueuetesting.MakeFlavorQuotas("nowhere").Resource("nvidia.com/gpu", "8").Obj()).
			AdmissionChecks("trainyard").Obj(),
		kueuetesting.MakeLocalQueue("lq-nowhere", tenant).ClusterQueue("cq-nowhere").Obj(),
	}
	for _, o := range objs {
		g.Expect(c.Create(ctx, o)).To(Succeed())
	}
	t.Cleanup(func() {
		for i := len(objs) - 1; i >= 0; i-- {
			_ = c.Delete(ctx, objs[i])
		}
	})
	makeRuntime(t, "torch-nowhere", "1s")
	tj := tytesting.MakeTrainJob("nowhere", tenant).Queue("lq-nowhere").
		RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch-nowhere").NumNodes(1).GPUsPerNode(4).Obj()
	submit(t, tj)
	wl := util.WorkloadOf(g, env.fleet.Hub.Client, tj)
	g.Eventually(func(g Gomega) {
		g.Expect(eventMessages(g, wl, "NoTarget")).To(ContainElement(ContainSubstring("no target serves flavor nowhere")))
	}, util.Timeout, util.Interval).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(wl), wl)).To(Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted)).To(BeFalse())
		g.Expect(dispatchesOf(g, wl)).To(BeEmpty())
	}, 3*time.Second, 500*time.Millisecond).Should(Succeed())
}

// TestJobLargerThanAnyNodeIsRejected: a pod asking for more GPUs than any
// node of the flavor's targets has can never run: the check is Rejected with
// a message, and Kueue deactivates the Workload.
func TestJobLargerThanAnyNodeIsRejected(t *testing.T) {
	g := NewWithT(t)
	ctx, c := context.Background(), env.fleet.Hub.Client
	makeRuntime(t, "torch-huge", "1s")
	tj := submit(t, trainJob("huge", "torch-huge", 1, 8))
	wl := util.WorkloadOf(g, env.fleet.Hub.Client, tj)
	// Kueue deactivates a Workload whose check is Rejected, then resets the
	// check to Pending (or finishes it, the TrainJob having failed); the
	// end and the event are what stay.
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(wl), wl)).To(Succeed())
		state, msg := checkState(wl)
		g.Expect(util.WorkloadEnded(wl)).To(BeTrue(), "check %s: %s; conditions %v", state, msg, wl.Status.Conditions)
		g.Expect(eventMessages(g, wl, "Rejected")).To(ContainElement(
			ContainSubstring("a pod asks for 8 GPUs, the largest node of targets spoke1, spoke2 has 4")))
	}, util.Timeout, util.Interval).Should(Succeed())
	g.Expect(dispatchesOf(g, wl)).To(BeEmpty())
}

// TestAdmissionCheckIsActive: trainyard marks its AdmissionCheck Active, or
// no ClusterQueue listing it could admit anything.
func TestAdmissionCheckIsActive(t *testing.T) {
	g := NewWithT(t)
	var ac kueue.AdmissionCheck
	g.Expect(env.fleet.Hub.Client.Get(context.Background(), client.ObjectKey{Name: "trainyard"}, &ac)).To(Succeed())
	g.Expect(ac.Spec.ControllerName).To(Equal(admissioncheck.ControllerName))
	g.Expect(apimeta.IsStatusConditionTrue(ac.Status.Conditions, kueue.AdmissionCheckActive)).To(BeTrue())
}

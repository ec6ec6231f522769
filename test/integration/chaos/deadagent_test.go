package chaos

import (
	"context"
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobset "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/harness/kube"
	"github.com/trainyard-dev/trainyard/test/util"
)

// TestKilledAgentKeepsItsJobOnAHoldTarget: the agent of a running job is
// killed with SIGKILL and stays down well past lease + grace, while the
// other spoke has room. A dead agent stops nothing, so the hub must keep
// the job where it is (AwaitingAgent): no second copy ever starts. When the
// agent is back it reports the first copy, which completes, once.
func TestKilledAgentKeepsItsJobOnAHoldTarget(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec, err := startRecorder(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	tj, first := runLongJob(t, "held-by-dead-agent")
	agent := env.procs["agent-"+first.Spec.TargetName]
	g.Expect(agent.Kill()).To(BeTrue())
	t.Cleanup(func() { _ = agent.Start() })

	g.Eventually(func(g Gomega) {
		g.Expect(availableReason(g, first.Spec.TargetName)).To(Equal(v1alpha1.ReasonAwaitingAgent))
	}, util.Timeout, util.Interval).Should(Succeed())
	// However long the agent stays away, the job stays on its target.
	g.Consistently(func(g Gomega) {
		d := liveDispatch(g, tj)
		g.Expect(d.Spec.Attempt).To(Equal(first.Spec.Attempt))
		g.Expect(d.Spec.TargetName).To(Equal(first.Spec.TargetName))
	}, leaseDuration+leaseGrace, util.Interval).Should(Succeed())

	g.Expect(agent.Start()).To(Succeed())
	completes(g, tj)
	copies, _, violations := rec.snapshot()
	g.Expect(violations).To(BeEmpty(), "samples with two live copies of one job")
	g.Expect(copiesOf(copies, first.Labels[v1alpha1.LabelWorkloadUID])).To(ConsistOf(
		HaveField("Target", first.Spec.TargetName)), "remote copies of the job")
}

// TestOutOfServiceRequeuesAKilledAgentsJob: the agent of a running job is
// killed for good. An operator makes sure nothing runs there (deletes the
// JobSet on the spoke) and sets the Target out of service: the hub requeues
// the job at once, it completes on the other spoke, and when the agent
// comes back nothing of the first attempt is left or reported.
func TestOutOfServiceRequeuesAKilledAgentsJob(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec, err := startRecorder(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	tj, first := runLongJob(t, "out-of-service")
	lost := first.Spec.TargetName
	agent := env.procs["agent-"+lost]
	g.Expect(agent.Kill()).To(BeTrue())
	t.Cleanup(func() { _ = agent.Start() })

	// The operator stops what runs there, then says so.
	spoke := spokeNamed(lost)
	g.Expect(spoke.Client.DeleteAllOf(ctx, &jobset.JobSet{}, client.InNamespace(first.Status.Remote.Namespace),
		client.MatchingLabels{v1alpha1.LabelWorkloadUID: first.Labels[v1alpha1.LabelWorkloadUID]})).To(Succeed())
	setOutOfService(t, lost, true)
	t.Cleanup(func() { setOutOfService(t, lost, false) })

	var second v1alpha1.Dispatch
	g.Eventually(func(g Gomega) {
		second = liveDispatch(g, tj)
		g.Expect(second.Spec.Attempt).To(BeNumerically(">", first.Spec.Attempt))
		g.Expect(second.Spec.TargetName).NotTo(Equal(lost))
	}, util.Timeout, util.Interval).Should(Succeed())
	completes(g, tj)

	setOutOfService(t, lost, false)
	g.Expect(agent.Start()).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(availableReason(g, lost)).To(Equal(v1alpha1.ReasonHeartbeatFresh))
	}, util.Timeout, util.Interval).Should(Succeed())
	g.Expect(liveDispatch(g, tj).Status.Phase).To(Equal(v1alpha1.DispatchSucceeded))
	copies, _, violations := rec.snapshot()
	g.Expect(violations).To(BeEmpty(), "samples with two live copies of one job")
	g.Expect(copiesOf(copies, first.Labels[v1alpha1.LabelWorkloadUID])).To(ConsistOf(
		HaveField("Target", lost), HaveField("Target", second.Spec.TargetName)), "remote copies: the one stopped by hand, then the requeued one")
}

// runLongJob submits a one-node job that runs 30 s on a spoke and returns
// it with its running Dispatch.
func runLongJob(t *testing.T, name string) (*trainer.TrainJob, v1alpha1.Dispatch) {
	t.Helper()
	g := NewWithT(t)
	const runtime = "kube-30s"
	var existing trainer.ClusterTrainingRuntime
	if err := env.fleet.Hub.Client.Get(context.Background(), client.ObjectKey{Name: runtime}, &existing); err != nil {
		makeRuntime(t, runtime, tytesting.MakeClusterTrainingRuntime(runtime).Toleration(kube.KwokToleration).
			PodAnnotation("kwok.trainyard.dev/run-for", "30s").Obj())
	}
	tj := tytesting.MakeTrainJob(name, tenant).Queue(kubeQueue).
		RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).NumNodes(1).GPUsPerNode(2).Obj()
	submitAll(t, []*trainer.TrainJob{tj})
	var d v1alpha1.Dispatch
	g.Eventually(func(g Gomega) {
		d = liveDispatch(g, tj)
		g.Expect(d.Status.Phase).To(Equal(v1alpha1.DispatchRunning))
		g.Expect(d.Status.Remote).NotTo(BeNil())
	}, util.Timeout, util.Interval).Should(Succeed())
	return tj, d
}

// liveDispatch is the current attempt's Dispatch of tj's Workload.
func liveDispatch(g Gomega, tj *trainer.TrainJob) v1alpha1.Dispatch {
	ctx := context.Background()
	var wls kueue.WorkloadList
	g.Expect(env.fleet.Hub.Client.List(ctx, &wls, client.InNamespace(tenant))).To(Succeed())
	uid := ""
	for _, wl := range wls.Items {
		for _, o := range wl.OwnerReferences {
			if o.Kind == trainer.TrainJobKind && o.Name == tj.Name {
				uid = string(wl.UID)
			}
		}
	}
	g.Expect(uid).NotTo(BeEmpty(), "the Workload of %s", tj.Name)
	var list v1alpha1.DispatchList
	g.Expect(env.fleet.Hub.Client.List(ctx, &list, client.MatchingLabels{v1alpha1.LabelWorkloadUID: uid})).To(Succeed())
	var live []v1alpha1.Dispatch
	for _, d := range list.Items {
		if d.DeletionTimestamp.IsZero() {
			live = append(live, d)
		}
	}
	g.Expect(live).To(HaveLen(1), "live Dispatches of %s", tj.Name)
	return live[0]
}

// completes waits until tj is Complete, failing at once should it fail.
func completes(g Gomega, tj *trainer.TrainJob) {
	g.Eventually(func(g Gomega) {
		var cur trainer.TrainJob
		g.Expect(env.fleet.Hub.Client.Get(context.Background(), client.ObjectKeyFromObject(tj), &cur)).To(Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(cur.Status.Conditions, trainer.TrainJobFailed)).To(BeFalse(), "%v", cur.Status.Conditions)
		g.Expect(apimeta.IsStatusConditionTrue(cur.Status.Conditions, trainer.TrainJobComplete)).To(BeTrue())
	}, 2*util.Timeout, util.Interval).Should(Succeed())
}

func availableReason(g Gomega, target string) string {
	return util.TargetReason(g, env.fleet.Hub.Client, target)
}

func setOutOfService(t *testing.T, target string, on bool) {
	t.Helper()
	ctx := context.Background()
	var cur v1alpha1.Target
	NewWithT(t).Expect(env.fleet.Hub.Client.Get(ctx, client.ObjectKey{Name: target}, &cur)).To(Succeed())
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Spec.OutOfService = on
	NewWithT(t).Expect(env.fleet.Hub.Client.Patch(ctx, &cur, patch)).To(Succeed())
}

func spokeNamed(name string) *kube.Cluster {
	for _, s := range env.fleet.Spokes {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// copiesOf are the recorded copies of one Workload.
func copiesOf(copies []remoteCopy, workload string) []remoteCopy {
	var out []remoteCopy
	for _, c := range copies {
		if c.Workload == workload {
			out = append(out, c)
		}
	}
	return out
}

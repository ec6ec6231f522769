package jobset

import (
	"context"
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetapi "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/backends/jobset"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// The tests run one after another: the capacity checks count every GPU.

// backendOptions are the suite's Target settings: its tenant namespace
// prefix, the kwok pod policy and the rack level.
func backendOptions() jobset.Options {
	return jobset.Options{Namespace: jobsPrefix, Policy: kwokPolicy, TopologyLevels: []string{rackLabel}}
}

func newBackend() *jobset.Backend {
	return jobset.New(cached, backendOptions())
}

// agentBackend reads as the agent does: the cache first, the API server to
// confirm what the cache has not seen.
func agentBackend() *jobset.Backend {
	o := backendOptions()
	o.LiveReader = spoke.Client
	return jobset.New(cached, o)
}

// kwokRuntime is the torch runtime whose pods tolerate the kwok nodes' taint
// and carry the given kwok annotations (run-for, exit-code). Failed pods are
// not retried, so a failing job fails at once.
func kwokRuntime(annotations map[string]string) trainer.TrainingRuntimeSpec {
	rt := tytesting.TorchRuntimeSpec(1)
	job := &rt.Template.Spec.ReplicatedJobs[0].Template
	job.Spec.BackoffLimit = ptr.To[int32](0)
	job.Spec.Template.Annotations = annotations
	job.Spec.Template.Spec.Tolerations = []corev1.Toleration{kube.KwokToleration}
	return rt
}

// gpuDispatch is a Dispatch of a 2-node, 4-GPU-per-node torch TrainJob.
func gpuDispatch(name string, annotations map[string]string) *v1alpha1.Dispatch {
	tj := tytesting.MakeTrainJob("train-"+name, "team-a").Queue("lq").Suspend(true).NumNodes(2).GPUsPerNode(gpusPerNode).Obj()
	return tytesting.MakeDispatch(name, "trainyard-spoke", "spoke").
		SnapshotTrainJob(tj).
		SnapshotRuntime(v1alpha1.RuntimeKindClusterTrainingRuntime, "torch-distributed", kwokRuntime(annotations)).
		PodSets(v1alpha1.PodSetPlacement{Name: "node", Count: 2}).Obj()
}

func observe(g Gomega, b *jobset.Backend, d *v1alpha1.Dispatch) *backends.Status {
	g.Expect(spoke.CheckAlive()).To(Succeed())
	st, err := b.Observe(context.Background(), d)
	g.Expect(err).NotTo(HaveOccurred())
	return st
}

func podsOf(g Gomega, name string) []corev1.Pod {
	var pods corev1.PodList
	// In every namespace: the names test runs a tenant of its own.
	g.Expect(spoke.Client.List(context.Background(), &pods,
		client.MatchingLabels{jobsetapi.JobSetNameKey: name})).To(Succeed())
	return pods.Items
}

func jobSetsOf(g Gomega, d *v1alpha1.Dispatch) []jobsetapi.JobSet {
	var list jobsetapi.JobSetList
	g.Expect(spoke.Client.List(context.Background(), &list,
		client.MatchingLabels{backends.LabelWorkloadUID: string(d.Spec.Workload.UID)})).To(Succeed())
	return list.Items
}

func envOf(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// TestSubmitRunsToSuccess: a rendered torch JobSet runs its two pods on two
// kwok GPU nodes and Observe follows it from Running to Succeeded. Repeated
// Submits, also from a Backend that never saw the first answer, adopt the
// one JobSet.
func TestSubmitRunsToSuccess(t *testing.T) {
	ctx, g := context.Background(), NewWithT(t)
	d := gpuDispatch("ok", map[string]string{"kwok.trainyard.dev/run-for": "4s"})
	b := newBackend()
	ref, err := b.Submit(ctx, d)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(*ref).To(Equal(v1alpha1.RemoteRef{Kind: "JobSet", Namespace: jobsNS, Name: backends.RemoteName(d)}))
	// At once: the cache may not have seen it yet, so this Submit may meet
	// AlreadyExists and adopt after re-reading.
	again, err := b.Submit(ctx, d)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(ref))

	g.Eventually(func(g Gomega) {
		st := observe(g, b, d)
		g.Expect(st.Phase).To(Equal(v1alpha1.DispatchRunning))
		g.Expect(st.StartTime).NotTo(BeNil())
	}, util.Timeout, util.Interval).Should(Succeed())

	pods := podsOf(g, ref.Name)
	g.Expect(pods).To(HaveLen(2))
	onNodes := map[string]bool{}
	for _, p := range pods {
		onNodes[p.Spec.NodeName] = true
		for k, v := range backends.RemoteLabels(d) {
			g.Expect(p.Labels).To(HaveKeyWithValue(k, v))
		}
		g.Expect(envOf(p.Spec.Containers[0], "PET_MASTER_ADDR")).To(Equal(ref.Name + "-node-0-0." + ref.Name))
		g.Expect(envOf(p.Spec.Containers[0], "PET_NNODES")).To(Equal("2"))
	}
	g.Expect(onNodes).To(HaveLen(2), "4 GPUs per pod on 4-GPU nodes needs two nodes")

	g.Eventually(func(g Gomega) {
		st := observe(g, b, d)
		g.Expect(st.Phase).To(Equal(v1alpha1.DispatchSucceeded), "reason %s: %s", st.Reason, st.Message)
		g.Expect(st.CompletionTime).NotTo(BeNil())
	}, util.Timeout, util.Interval).Should(Succeed())

	lost, err := newBackend().Submit(ctx, d)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(lost).To(Equal(ref))
	g.Expect(jobSetsOf(g, d)).To(HaveLen(1))
}

// TestCancelFreesCapacity: while a long job runs, Capacity shows its 8 GPUs
// taken, by rack; Cancel reports gone only once the JobSet and its pods are
// gone, and the GPUs are free again.
func TestCancelFreesCapacity(t *testing.T) {
	ctx, g := context.Background(), NewWithT(t)
	b := newBackend()
	total := int64(len(nodes) * gpusPerNode)
	g.Eventually(func(g Gomega) { g.Expect(freeGPUs(g, b)).To(Equal(total)) }, util.Timeout, util.Interval).Should(Succeed())

	d := gpuDispatch("long", map[string]string{"kwok.trainyard.dev/run-for": "1h"})
	ref, err := b.Submit(ctx, d)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		g.Expect(observe(g, b, d).Phase).To(Equal(v1alpha1.DispatchRunning))
		g.Expect(freeGPUs(g, b)).To(Equal(total - 2*gpusPerNode))
	}, util.Timeout, util.Interval).Should(Succeed())

	capacity, err := b.Capacity(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(capacity.Topology.Levels).To(Equal([]string{rackLabel, corev1.LabelHostname}))
	g.Expect(capacity.Topology.Domains).To(HaveLen(2))
	var perNode []int32
	for i, dom := range capacity.Topology.Domains {
		g.Expect(dom.Values).To(Equal([]string{[]string{"r1", "r2"}[i]}))
		g.Expect(dom.Nodes).To(Equal([]string{nodes[2*i].Name, nodes[2*i+1].Name}))
		perNode = append(perNode, dom.FreeGPUsPerNode...)
	}
	g.Expect(perNode).To(ConsistOf(int32(0), int32(0), int32(gpusPerNode), int32(gpusPerNode)))

	util.CancelUntilGone(g, b, d)
	g.Expect(podsOf(g, ref.Name)).To(BeEmpty())
	err = spoke.Client.Get(ctx, client.ObjectKey{Namespace: jobsNS, Name: ref.Name}, &jobsetapi.JobSet{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "get jobset after cancel: %v", err)
	_, err = b.Observe(ctx, d)
	g.Expect(err).To(MatchError(backends.ErrNotFound))
	g.Eventually(func(g Gomega) { g.Expect(freeGPUs(g, b)).To(Equal(total)) }, util.Timeout, util.Interval).Should(Succeed())
}

func freeGPUs(g Gomega, b *jobset.Backend) int64 {
	c, err := b.Capacity(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	q := c.Free[jobset.GPUResource]
	return q.Value()
}

// TestFailedJobReportsExitCode: pods that exit 3 fail the JobSet, and
// Observe reports Failed with that exit code.
func TestFailedJobReportsExitCode(t *testing.T) {
	ctx, g := context.Background(), NewWithT(t)
	b := newBackend()
	d := gpuDispatch("fails", map[string]string{"kwok.trainyard.dev/exit-code": "3"})
	_, err := b.Submit(ctx, d)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		st := observe(g, b, d)
		g.Expect(st.Phase).To(Equal(v1alpha1.DispatchFailed))
		g.Expect(st.Reason).NotTo(BeEmpty())
		g.Expect(st.ExitCode).To(HaveValue(Equal(int32(3))))
	}, util.Timeout, util.Interval).Should(Succeed())
}

// TestListRemoteAndDelete: ListRemote finds the suite's JobSets with their
// Dispatches, and Delete removes them.
func TestListRemoteAndDelete(t *testing.T) {
	ctx, g := context.Background(), NewWithT(t)
	b := newBackend()
	d := gpuDispatch("listed", map[string]string{"kwok.trainyard.dev/run-for": "1h"})
	d.Spec.Attempt = 2
	ref, err := b.Submit(ctx, d)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		work, err := b.ListRemote(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(work).To(ContainElement(backends.RemoteWork{
			Ref: *ref, DispatchNamespace: d.Namespace, DispatchName: d.Name, Attempt: 2,
		}))
	}, util.Timeout, util.Interval).Should(Succeed())

	work, err := b.ListRemote(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	for _, w := range work {
		g.Expect(b.Delete(ctx, w)).To(Succeed())
	}
	g.Eventually(func(g Gomega) {
		var list jobsetapi.JobSetList
		g.Expect(spoke.Client.List(ctx, &list, client.InNamespace(jobsNS))).To(Succeed())
		g.Expect(list.Items).To(BeEmpty())
		g.Expect(podsOf(g, ref.Name)).To(BeEmpty())
	}, util.Timeout, util.Interval).Should(Succeed())
}

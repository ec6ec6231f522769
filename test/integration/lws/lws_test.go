package lws

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	lwsapi "sigs.k8s.io/lws/api/leaderworkerset/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/backends/lws"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// The tests run one after another: capacity checks count every GPU.

func newBackend(t *testing.T) *lws.Backend {
	cs, err := kubernetes.NewForConfig(spoke.Config)
	if err != nil {
		t.Fatal(err)
	}
	return lws.New(cached, lws.Options{Namespace: jobsPrefix, TopologyLevels: []string{rackLabel}, LiveReader: spoke.Client, Logs: cs,
		// The tests' runtimes tolerate the kwok taint, as runtimes written for kwok do.
		Policy: kwokPolicy})
}

// onKwok makes every pod of rt tolerate the kwok nodes and carry the kwok
// annotations (run-for, exit-code).
func onKwok(rt trainer.TrainingRuntimeSpec, annotations map[string]string) trainer.TrainingRuntimeSpec {
	for i := range rt.Template.Spec.ReplicatedJobs {
		pod := &rt.Template.Spec.ReplicatedJobs[i].Template.Spec.Template
		pod.Annotations = annotations
		pod.Spec.Tolerations = []corev1.Toleration{kube.KwokToleration}
	}
	return rt
}

// torchDispatch is a 2-node, 4-GPU-per-node torch job placed in rack r2.
func torchDispatch(name string, annotations map[string]string) *v1alpha1.Dispatch {
	tj := tytesting.MakeTrainJob("train-"+name, "team-a").Queue("lq").Suspend(true).NumNodes(2).GPUsPerNode(gpusPerNode).Obj()
	return tytesting.MakeDispatch(name, "trainyard-spoke", "spoke").
		SnapshotTrainJob(tj).
		SnapshotRuntime(v1alpha1.RuntimeKindClusterTrainingRuntime, "torch-distributed", onKwok(tytesting.TorchRuntimeSpec(1), annotations)).
		PodSets(v1alpha1.PodSetPlacement{Name: "node", Count: 2, Topology: &v1alpha1.TopologyAssignment{
			Levels: []string{rackLabel}, Domains: []v1alpha1.TopologyDomainAssignment{{Values: []string{"r2"}, Count: 2}},
		}}).Obj()
}

func observe(g Gomega, b *lws.Backend, d *v1alpha1.Dispatch) *backends.Status {
	g.Expect(spoke.CheckAlive()).To(Succeed())
	st, err := b.Observe(context.Background(), d)
	g.Expect(err).NotTo(HaveOccurred())
	return st
}

func podsOf(g Gomega, name string) map[string]corev1.Pod {
	var pods corev1.PodList
	g.Expect(spoke.Client.List(context.Background(), &pods, client.InNamespace(jobsNS),
		client.MatchingLabels{lwsapi.SetNameLabelKey: name})).To(Succeed())
	out := map[string]corev1.Pod{}
	for _, p := range pods.Items {
		out[p.Name] = p
	}
	return out
}

func env(c corev1.Container) map[string]corev1.EnvVar {
	out := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		out[e.Name] = e
	}
	return out
}

// TestTorchGroupRunsToCompletion: a torch Dispatch becomes one LWS group,
// leader rank 0 and one worker, both in the placed rack, wired by LWS's
// webhook for the rendezvous. When the leader's trainer exits 0 the job
// succeeds, the set is scaled to zero (GPUs free again) and the outcome is
// kept on the LeaderWorkerSet.
func TestTorchGroupRunsToCompletion(t *testing.T) {
	ctx, g := context.Background(), NewWithT(t)
	b := newBackend(t)
	capacity, err := b.Capacity(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	allFree := capacity.Free[corev1.ResourceName("nvidia.com/gpu")]
	d := torchDispatch("torch", map[string]string{"kwok.trainyard.dev/run-for": "5s"})
	ref, err := b.Submit(ctx, d)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ref.Kind).To(Equal(lws.Kind))
	name := ref.Name
	defer util.CancelUntilGone(g, b, d)

	again, err := b.Submit(ctx, d)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(ref), "a second Submit adopts")

	g.Eventually(func(g Gomega) {
		g.Expect(observe(g, b, d).Phase).To(Equal(v1alpha1.DispatchRunning))
	}, util.Timeout, util.Interval).Should(Succeed())
	pods := podsOf(g, name)
	g.Expect(pods).To(HaveLen(2))
	leader, worker := pods[name+"-0"], pods[name+"-0-1"]
	for _, p := range []corev1.Pod{leader, worker} {
		g.Expect(p.Spec.NodeName).To(HavePrefix("gpu-r2-"), "pod %s left its rack", p.Name)
		e := env(p.Spec.Containers[0])
		g.Expect(p.Spec.Containers[0].Env[0].Name).To(Equal("LWS_LEADER_ADDRESS"))
		g.Expect(e["LWS_LEADER_ADDRESS"].Value).To(Equal(name + "-0." + name + "." + jobsNS))
		g.Expect(e["PET_MASTER_ADDR"].Value).To(Equal("$(LWS_LEADER_ADDRESS)"))
		g.Expect(e["PET_NODE_RANK"].ValueFrom.FieldRef.FieldPath).To(Equal("metadata.labels['leaderworkerset.sigs.k8s.io/worker-index']"))
		g.Expect(e["PET_NNODES"].Value).To(Equal("2"))
	}
	g.Expect(leader.Labels[lwsapi.WorkerIndexLabelKey]).To(Equal("0"))
	g.Expect(worker.Labels[lwsapi.WorkerIndexLabelKey]).To(Equal("1"))

	var st *backends.Status
	g.Eventually(func(g Gomega) {
		st = observe(g, b, d)
		g.Expect(st.Phase).To(Equal(v1alpha1.DispatchSucceeded))
	}, util.Timeout, util.Interval).Should(Succeed())
	g.Expect(st.Reason).To(Equal(v1alpha1.ReasonLeaderSucceeded))
	g.Expect(st.CompletionTime).NotTo(BeNil())

	var set lwsapi.LeaderWorkerSet
	g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Namespace: jobsNS, Name: name}, &set)).To(Succeed())
	g.Expect(ptr.Deref(set.Spec.Replicas, -1)).To(BeZero())
	var rec map[string]any
	g.Expect(json.Unmarshal([]byte(set.Annotations[v1alpha1.AnnotationLeaderWorkerSetFinished]), &rec)).To(Succeed())
	g.Expect(rec["phase"]).To(Equal(string(v1alpha1.DispatchSucceeded)))
	g.Eventually(func(g Gomega) {
		g.Expect(podsOf(g, name)).To(BeEmpty())
		capacity, err := b.Capacity(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(capacity.Free[corev1.ResourceName("nvidia.com/gpu")]).To(Equal(allFree))
	}, util.Timeout, util.Interval).Should(Succeed())
	g.Expect(observe(g, b, d).Phase).To(Equal(v1alpha1.DispatchSucceeded), "the outcome outlives the pods")
}

// TestFailingWorkerFailsTheJob: a trainer container that exits non-zero in
// any pod fails the job with its exit code, once, though kwok (like a
// kubelet) restarts the container.
func TestFailingWorkerFailsTheJob(t *testing.T) {
	ctx, g := context.Background(), NewWithT(t)
	b := newBackend(t)
	d := torchDispatch("fails", map[string]string{"kwok.trainyard.dev/run-for": "2s", "kwok.trainyard.dev/exit-code": "3"})
	_, err := b.Submit(ctx, d)
	g.Expect(err).NotTo(HaveOccurred())
	defer util.CancelUntilGone(g, b, d)
	var st *backends.Status
	g.Eventually(func(g Gomega) {
		st = observe(g, b, d)
		g.Expect(st.Phase).To(Equal(v1alpha1.DispatchFailed))
	}, util.Timeout, util.Interval).Should(Succeed())
	g.Expect(st.Reason).To(Equal(v1alpha1.ReasonContainerFailed))
	g.Expect(ptr.Deref(st.ExitCode, 0)).To(Equal(int32(3)))
	g.Expect(st.Message).To(ContainSubstring("exited with code 3"))
}

// TestMPIGroupRunsWithLauncherAsLeader: an OpenMPI Dispatch's launcher is
// the group's leader and its nodes the workers; the hostfile names the
// workers by their LWS hostnames, keys and hostfile are owned by the
// LeaderWorkerSet, and the launcher's exit ends the job.
func TestMPIGroupRunsWithLauncherAsLeader(t *testing.T) {
	ctx, g := context.Background(), NewWithT(t)
	b := newBackend(t)
	tj := tytesting.MakeTrainJob("train-mpi", "team-a").Queue("lq").Suspend(true).NumNodes(2).GPUsPerNode(1).Obj()
	d := tytesting.MakeDispatch("mpi", "trainyard-spoke", "spoke").
		SnapshotTrainJob(tj).
		SnapshotRuntime(v1alpha1.RuntimeKindClusterTrainingRuntime, "mpi", onKwok(tytesting.MPIRuntimeSpec(1, 2), map[string]string{"kwok.trainyard.dev/run-for": "4s"})).
		PodSets(v1alpha1.PodSetPlacement{Name: "launcher", Count: 1}, v1alpha1.PodSetPlacement{Name: "node", Count: 2}).Obj()
	ref, err := b.Submit(ctx, d)
	g.Expect(err).NotTo(HaveOccurred())
	name := ref.Name
	defer util.CancelUntilGone(g, b, d)

	var hostfile corev1.ConfigMap
	g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Namespace: jobsNS, Name: name + "-mpi-hostfile"}, &hostfile)).To(Succeed())
	g.Expect(hostfile.Data["hostfile"]).To(Equal(fmt.Sprintf("%[1]s-0-1.%[1]s slots=2\n%[1]s-0-2.%[1]s slots=2\n", name)))
	var keys corev1.Secret
	g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Namespace: jobsNS, Name: name + "-mpi-ssh-auth"}, &keys)).To(Succeed())
	for _, o := range []client.Object{&keys, &hostfile} {
		g.Expect(o.GetOwnerReferences()).To(HaveLen(1))
		g.Expect(o.GetOwnerReferences()[0].Kind).To(Equal("LeaderWorkerSet"))
	}
	g.Eventually(func(g Gomega) {
		pods := podsOf(g, name)
		g.Expect(pods).To(HaveLen(3))
		g.Expect(pods[name+"-0"].Spec.Containers[0].Command).To(HaveExactElements("mpirun", "/home/mpiuser/pi"))
		g.Expect(pods[name+"-0-2"].Spec.Containers[0].Command).To(HaveExactElements("/usr/sbin/sshd", "-De"))
	}, util.Timeout, util.Interval).Should(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(observe(g, b, d).Phase).To(Equal(v1alpha1.DispatchSucceeded))
	}, util.Timeout, util.Interval).Should(Succeed())

	// Cancel removes the set; the garbage collector takes what it owned.
	util.CancelUntilGone(g, b, d)
	g.Eventually(func(g Gomega) {
		err := spoke.Client.Get(ctx, client.ObjectKeyFromObject(&keys), &corev1.Secret{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the key Secret outlived its LeaderWorkerSet: %v", err)
	}, util.Timeout, util.Interval).Should(Succeed())
}

// TestLogsOfAWorker: Logs reads the trainer container of the pod whose
// worker index is asked for (the leader by default).
func TestLogsOfAWorker(t *testing.T) {
	ctx, g := context.Background(), NewWithT(t)
	b := newBackend(t)
	d := torchDispatch("logs", map[string]string{"kwok.trainyard.dev/run-for": "1h"})
	ref, err := b.Submit(ctx, d)
	g.Expect(err).NotTo(HaveOccurred())
	defer util.CancelUntilGone(g, b, d)
	g.Eventually(func(g Gomega) {
		g.Expect(observe(g, b, d).Phase).To(Equal(v1alpha1.DispatchRunning))
	}, util.Timeout, util.Interval).Should(Succeed())
	for pod, line := range map[string]string{ref.Name + "-0": "rank 0 says hi", ref.Name + "-0-1": "rank 1 says hi"} {
		_, err := spoke.SetPodLogs(ctx, jobsNS, map[string]string{"metadata.name": pod}, "node", line)
		g.Expect(err).NotTo(HaveOccurred())
	}
	for replica, want := range map[string]string{"": "rank 0 says hi\n", "1": "rank 1 says hi\n"} {
		g.Eventually(func(g Gomega) {
			logs, err := b.Logs(ctx, d, backends.LogOptions{Replica: replica, LimitBytes: 1 << 20})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(logs.Data)).To(Equal(want))
		}, util.Timeout, util.Interval).Should(Succeed(), "replica %q", replica)
	}
	_, err = b.Logs(ctx, d, backends.LogOptions{Replica: "7"})
	g.Expect(err).To(MatchError(ContainSubstring(`no replica "7"; worker indexes: 0, 1`)))
}

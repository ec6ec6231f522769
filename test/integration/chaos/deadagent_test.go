package chaos

import (
	"context"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobset "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/hub/dispatch"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// TestKilledAgentKeepsItsJobOnAHoldTarget: every replica of the agent of a
// running Slurm job (the Slurm Target holds its jobs, leaseLoss Hold) is
// killed with SIGKILL and stays down past the hub's requeue deadline (the
// fence deadline, the agent's stop bound and the grace). A dead agent
// stops nothing, so the hub must keep the job where it is (AwaitingAgent):
// no second copy ever starts. The job ends while its agent is down; when
// the agent is back it reports that end, once.
func TestKilledAgentKeepsItsJobOnAHoldTarget(t *testing.T) {
	g, rec := NewWithT(t), recording(t)
	tj := slurmJob(t, "held-by-dead-agent", "20")
	first := runJobs(t, tj)[0]
	g.Expect(first.Spec.TargetName).To(Equal(hpcTarget))
	restart := killAgents(t, hpcTarget)

	// However long the agent stays away, the job stays on its target.
	g.Eventually(func(g Gomega) {
		g.Expect(availableReason(g, hpcTarget)).To(Equal(v1alpha1.ReasonAwaitingAgent))
	}, fenceAfter+leaseGrace+2*time.Minute, util.Interval).Should(Succeed())
	g.Consistently(func(g Gomega) {
		d := liveDispatch(g, tj)
		g.Expect(d.Spec.Attempt).To(Equal(first.Spec.Attempt))
		g.Expect(d.Spec.TargetName).To(Equal(hpcTarget))
	}, 3*time.Second, util.Interval).Should(Succeed())

	restart()
	completes(g, tj)
	succeededOnce(g, rec, tj, hpcTarget)
}

// TestOutOfServiceRequeuesAKilledAgentsJob: every replica of the agent of a
// running job is killed for good. An operator makes sure nothing runs
// there (deletes the JobSet on the spoke) and sets the Target out of
// service: the hub requeues the job at once, and it completes on the other
// spoke. The hub restarts meanwhile. A job that had succeeded on that
// target before keeps its outcome: it is never requeued. When the agent
// comes back nothing of the first attempt is left or reported.
func TestOutOfServiceRequeuesAKilledAgentsJob(t *testing.T) {
	g, rec := NewWithT(t), recording(t)
	lost, other := env.fleet.Spokes[0].Name, env.fleet.Spokes[1].Name
	resume := pause(t, other) // both jobs go to lost
	done := kubeJob(t, "done-before-out-of-service", "2s")
	runJobs(t, done)
	completes(g, done)
	tj := kubeJob(t, "out-of-service", "20s")
	first := runJobs(t, tj)[0]
	g.Expect(first.Spec.TargetName).To(Equal(lost))
	resume()
	restart := killAgents(t, lost)

	// The operator stops what runs there, then says so.
	spoke := spokeNamed(lost)
	g.Expect(spoke.Client.DeleteAllOf(context.Background(), &jobset.JobSet{}, client.InNamespace(first.Status.Remote.Namespace),
		client.MatchingLabels{v1alpha1.LabelWorkloadUID: first.Labels[v1alpha1.LabelWorkloadUID]})).To(Succeed())
	patchTarget(t, lost, func(s *v1alpha1.TargetSpec) { s.OutOfService = true })
	t.Cleanup(func() { patchTarget(t, lost, func(s *v1alpha1.TargetSpec) { s.OutOfService = false }) })

	var second v1alpha1.Dispatch
	g.Eventually(func(g Gomega) {
		second = liveDispatch(g, tj)
		g.Expect(second.Spec.Attempt).To(BeNumerically(">", first.Spec.Attempt))
		g.Expect(second.Spec.TargetName).NotTo(Equal(lost))
	}, util.Timeout, util.Interval).Should(Succeed())
	// The hub restarts while the target is lost: its new leader reconciles
	// every Workload again, the finished job's too.
	for _, name := range env.names {
		if targetOf(name) == "" {
			p := env.procs[name]
			g.Expect(p.Kill()).To(BeTrue(), "kill %s", name)
			g.Expect(p.Start()).To(Succeed())
		}
	}
	completes(g, tj)

	patchTarget(t, lost, func(s *v1alpha1.TargetSpec) { s.OutOfService = false })
	restart()
	g.Eventually(func(g Gomega) {
		g.Expect(availableReason(g, lost)).To(Equal(v1alpha1.ReasonHeartbeatFresh))
	}, util.Timeout, util.Interval).Should(Succeed())
	g.Expect(liveDispatch(g, tj).Status.Phase).To(Equal(v1alpha1.DispatchSucceeded))
	copies, _, violations := rec.snapshot()
	g.Expect(violations).To(BeEmpty(), "samples with two live copies of one job")
	g.Expect(copiesOf(copies, first.Labels[v1alpha1.LabelWorkloadUID])).To(ConsistOf(
		HaveField("Target", lost), HaveField("Target", second.Spec.TargetName)), "remote copies: the one stopped by hand, then the requeued one")
	succeededOnce(g, rec, done, lost)
}

// recording starts a recorder that runs until the test ends.
func recording(t *testing.T) *recorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	rec, err := startRecorder(ctx)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return rec
}

// killAgents kills every replica of target's agent with SIGKILL and
// returns what starts them again (run at cleanup too).
func killAgents(t *testing.T, target string) (restart func()) {
	t.Helper()
	g := NewWithT(t)
	for _, p := range agentsOf(target) {
		// A replica may already be down: one restarted while an earlier
		// test cut it off from the hub cannot read its Target and exits.
		if p.Running() {
			g.Expect(p.Kill()).To(BeTrue(), "kill %s", p.Name)
		}
		g.Expect(p.Running()).To(BeFalse(), "%s still runs", p.Name)
	}
	start := func() {
		for _, p := range agentsOf(target) {
			g.Expect(p.Start()).To(Succeed())
		}
	}
	t.Cleanup(start)
	return start
}

// kubeJob is a one-node TrainJob that runs for runFor on a kwok spoke.
func kubeJob(t *testing.T, name, runFor string) *trainer.TrainJob {
	rt := "kube-" + runFor
	ensureRuntime(t, tytesting.MakeClusterTrainingRuntime(rt).Toleration(kube.KwokToleration).
		PodAnnotation("kwok.trainyard.dev/run-for", runFor).Obj())
	return tytesting.MakeTrainJob(name, tenant).Queue(kubeQueue).
		RuntimeRef(trainer.ClusterTrainingRuntimeKind, rt).NumNodes(1).GPUsPerNode(2).Obj()
}

// slurmJob is a one-node TrainJob that sleeps for seconds on Slurm.
func slurmJob(t *testing.T, name, seconds string) *trainer.TrainJob {
	ensureRuntime(t, tytesting.MakeClusterTrainingRuntime("slurm").Spec(tytesting.TorchRuntimeSpec(1)).Obj())
	return tytesting.MakeTrainJob(name, tenant).Queue(hpcQueue).
		RuntimeRef(trainer.ClusterTrainingRuntimeKind, "slurm").NumNodes(1).GPUsPerNode(2).
		Command([]string{"sleep"}, seconds).Obj()
}

// ensureRuntime makes rt unless a runtime of its name exists.
func ensureRuntime(t *testing.T, rt *trainer.ClusterTrainingRuntime) {
	t.Helper()
	var existing trainer.ClusterTrainingRuntime
	if err := env.fleet.Hub.Client.Get(context.Background(), client.ObjectKeyFromObject(rt), &existing); err != nil {
		util.CreateForTest(t, env.fleet.Hub.Client, rt)
	}
}

// runJobs submits the jobs and returns their Dispatches once each runs.
func runJobs(t *testing.T, tjs ...*trainer.TrainJob) []v1alpha1.Dispatch {
	t.Helper()
	submitAll(t, tjs)
	out := make([]v1alpha1.Dispatch, len(tjs))
	for i, tj := range tjs {
		NewWithT(t).Eventually(func(g Gomega) {
			out[i] = liveDispatch(g, tj)
			g.Expect(out[i].Status.Phase).To(Equal(v1alpha1.DispatchRunning))
			g.Expect(out[i].Status.Remote).NotTo(BeNil())
		}, util.Timeout, util.Interval).Should(Succeed(), tj.Name)
	}
	return out
}

// succeededOnce asserts that tj succeeded exactly once, on target, at its
// first attempt: its Dispatch succeeded, it has one remote copy, which
// succeeded, and the hub never requeued it.
func succeededOnce(g Gomega, rec *recorder, tj *trainer.TrainJob, target string) {
	d := liveDispatch(g, tj)
	g.Expect(d.Spec.Attempt).To(BeEquivalentTo(1), "attempt of %s", tj.Name)
	g.Expect(d.Spec.TargetName).To(Equal(target))
	g.Expect(d.Status.Phase).To(Equal(v1alpha1.DispatchSucceeded))
	uid := d.Labels[v1alpha1.LabelWorkloadUID]
	g.Expect(eventsByWorkload(tenantEvents(g), dispatch.EventRequeued)[uid]).To(BeZero(), "requeues of %s", tj.Name)
	g.Eventually(func(g Gomega) {
		_ = rec.pollSlurm(context.Background())
		copies, _, violations := rec.snapshot()
		g.Expect(violations).To(BeEmpty(), "samples with two live copies of one job")
		g.Expect(copiesOf(copies, uid)).To(ConsistOf(And(HaveField("Target", target), HaveField("Succeeded", true))),
			"remote copies of %s", tj.Name)
	}, 10*time.Second, util.Interval).Should(Succeed())
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

// patchTarget changes the spec of the Target named target.
func patchTarget(t *testing.T, target string, change func(*v1alpha1.TargetSpec)) {
	t.Helper()
	ctx := context.Background()
	var cur v1alpha1.Target
	NewWithT(t).Expect(env.fleet.Hub.Client.Get(ctx, client.ObjectKey{Name: target}, &cur)).To(Succeed())
	patch := client.MergeFrom(cur.DeepCopy())
	change(&cur.Spec)
	NewWithT(t).Expect(env.fleet.Hub.Client.Patch(ctx, &cur, patch)).To(Succeed())
}

// pause stops new dispatches to target until resume runs (at cleanup too).
func pause(t *testing.T, target string) (resume func()) {
	patchTarget(t, target, func(s *v1alpha1.TargetSpec) { s.Paused = true })
	resume = func() { patchTarget(t, target, func(s *v1alpha1.TargetSpec) { s.Paused = false }) }
	t.Cleanup(resume)
	return resume
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

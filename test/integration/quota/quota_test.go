package quota

import (
	"context"
	"strings"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobset "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

const gpu = "nvidia.com/gpu"

// TestBorrowFairSharingAndPriorityPreemption walks the samples' quota
// story on 4-GPU nodes. team-a owns spoke1 (16 GPUs), team-b half of spoke2
// (8 GPUs), and the cohort owns the other half as a burst pool. Each team's
// Slurm allocation (4 GPUs) is too small for any job here that would need
// preemption, so those jobs stay on the spokes or wait.
func TestBorrowFairSharingAndPriorityPreemption(t *testing.T) {
	g := NewWithT(t)
	rt := tytesting.MakeClusterTrainingRuntime("quota-long").Toleration(kube.KwokToleration).
		PodAnnotation("kwok.trainyard.dev/run-for", "1h").Obj()
	ctx := context.Background()
	g.Expect(env.fleet.Hub.Client.Create(ctx, rt)).To(Succeed())
	t.Cleanup(func() { _ = env.fleet.Hub.Client.Delete(ctx, rt) })
	job := func(name, team, priority string, nodes int32) *trainer.TrainJob {
		return submit(t, tytesting.MakeTrainJob(name, team).Queue("lq").PriorityClass(priority).
			RuntimeRef(trainer.ClusterTrainingRuntimeKind, rt.Name).NumNodes(nodes).GPUsPerNode(4).Obj())
	}

	// 1. team-a's low-priority a1 fills its own spoke.
	a1 := job("a1", "team-a", "low", 4)
	expectRunningOn(t, a1, "spoke1-gpu", "spoke1")

	// 2. Borrowing: team-b's b1 takes its own 8 GPUs of spoke2, and b2
	// borrows the cohort's pool there rather than waiting or using Slurm.
	b1 := job("b1", "team-b", "low", 2)
	expectRunningOn(t, b1, "spoke2-gpu", "spoke2")
	b2 := job("b2", "team-b", "low", 2)
	expectRunningOn(t, b2, "spoke2-gpu", "spoke2")
	var bShare int64
	g.Eventually(func(g Gomega) {
		cq := clusterQueue(g, "team-b")
		g.Expect(borrowedOf(cq, "spoke2-gpu")).To(Equal(int64(8)), "team-b's borrowed spoke2 GPUs")
		g.Expect(cq.Status.FairSharing).NotTo(BeNil(), "fair sharing status")
		bShare = cq.Status.FairSharing.WeightedShare
		g.Expect(bShare).To(BeNumerically(">", 0), "team-b's weighted share")
	}, util.Timeout, util.Interval).Should(Succeed())

	// 3. Fair sharing: team-a's a2 (low) fits nowhere without preemption and
	// may not preempt a1 (same priority). It would borrow as much as b2
	// does, but team-a's weight is twice team-b's, so its share would be
	// half of team-b's: Kueue preempts b2 for it. Without fair sharing a
	// borrower cannot preempt; with equal weights the shares would tie and
	// nothing would be preempted. trainyard cancels b2's JobSet on spoke2
	// and places a2 there.
	a2 := job("a2", "team-a", "low", 2)
	expectPreempted(t, b2, kueue.InCohortFairSharingReason, "spoke2")
	expectRunningOn(t, a2, "spoke2-gpu", "spoke2")
	g.Eventually(func(g Gomega) int64 { return shareOf(g, "team-a") }, util.Timeout, util.Interval).
		Should(SatisfyAll(BeNumerically(">", 0), BeNumerically("<", bShare)), "team-a's share with a2 against team-b's before")
	// b2 now waits: taking the pool back would give team-b the larger share.
	// It holds no quota and has no remote work anywhere.
	g.Consistently(func(g Gomega) {
		wl := workload(g, b2)
		g.Expect(meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved)).To(BeFalse(), "b2 reserved quota again")
		g.Expect(remoteJobSets(g, b2)).To(BeEmpty())
	}, 5*time.Second, util.Interval).Should(Succeed())

	// 4. Priority: team-a's high-priority a3 preempts its own low-priority a1.
	a3 := job("a3", "team-a", "high", 4)
	expectPreempted(t, a1, kueue.InClusterQueueReason, "spoke1")
	expectRunningOn(t, a3, "spoke1-gpu", "spoke1")

	// Each spoke runs exactly the admitted jobs: nothing left of the
	// preempted ones, no duplicates.
	g.Expect(remoteJobSets(g, a1)).To(BeEmpty())
	g.Expect(remoteJobSets(g, b2)).To(BeEmpty())
	for _, s := range env.fleet.Spokes {
		var list jobset.JobSetList
		g.Expect(s.Client.List(ctx, &list)).To(Succeed())
		g.Expect(list.Items).To(HaveLen(map[string]int{"spoke1": 1, "spoke2": 2}[s.Name]), "JobSets on %s", s.Name)
	}
}

// submit creates a TrainJob and, at the end of the test, deletes it and
// waits until its remote work is gone.
func submit(t *testing.T, tj *trainer.TrainJob) *trainer.TrainJob {
	t.Helper()
	return util.SubmitTrainJob(t, env.fleet.Hub.Client, tj, func(g Gomega) int { return len(remoteJobSets(g, tj)) })
}

// expectRunningOn waits until tj is admitted with flavor and its only
// JobSet runs on spoke.
func expectRunningOn(t *testing.T, tj *trainer.TrainJob, flavor, spoke string) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		wl := workload(g, tj)
		g.Expect(meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted)).To(BeTrue(), "%s admitted", tj.Name)
		g.Expect(wl.Status.Admission.PodSetAssignments).NotTo(BeEmpty())
		g.Expect(wl.Status.Admission.PodSetAssignments[0].Flavors[gpu]).To(Equal(kueue.ResourceFlavorReference(flavor)), "%s's GPU flavor", tj.Name)
		var running []string
		for _, d := range dispatches(g, wl) {
			if d.Status.Phase == v1alpha1.DispatchRunning {
				running = append(running, d.Spec.TargetName)
			}
		}
		g.Expect(running).To(ConsistOf(spoke), "targets running %s", tj.Name)
		g.Expect(remoteJobSets(g, tj)).To(ConsistOf(spoke + "/" + remoteNameOf(g, tj)))
	}, util.Timeout, util.Interval).Should(Succeed())
}

// expectPreempted waits until Kueue has preempted tj for reason and
// trainyard has removed its JobSet from spoke.
func expectPreempted(t *testing.T, tj *trainer.TrainJob, reason, spoke string) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		wl := workload(g, tj)
		c := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadPreempted)
		g.Expect(c).NotTo(BeNil(), "%s not preempted", tj.Name)
		g.Expect(c.Reason).To(Equal(reason), "%s preempted: %s", tj.Name, c.Message)
		for _, js := range remoteJobSets(g, tj) {
			g.Expect(js).NotTo(HavePrefix(spoke+"/"), "JobSet of preempted %s still on %s", tj.Name, spoke)
		}
	}, util.Timeout, util.Interval).Should(Succeed())
}

func workload(g Gomega, tj *trainer.TrainJob) *kueue.Workload {
	return util.WorkloadOf(g, env.fleet.Hub.Client, tj)
}

func dispatches(g Gomega, wl *kueue.Workload) []v1alpha1.Dispatch {
	var list v1alpha1.DispatchList
	g.Expect(env.fleet.Hub.Client.List(context.Background(), &list,
		client.MatchingLabels{v1alpha1.LabelWorkloadUID: string(wl.UID)})).To(Succeed())
	return list.Items
}

// remoteNameOf is the remote name of tj's running Dispatch.
func remoteNameOf(g Gomega, tj *trainer.TrainJob) string {
	for _, d := range dispatches(g, workload(g, tj)) {
		if d.Status.Remote != nil && d.Status.Phase == v1alpha1.DispatchRunning {
			return d.Status.Remote.Name
		}
	}
	return "<none running>"
}

// remoteJobSets lists "spoke/name" of every JobSet made for tj on any
// spoke (remote names start with the TrainJob's name).
func remoteJobSets(g Gomega, tj *trainer.TrainJob) []string {
	var out []string
	for _, s := range env.fleet.Spokes {
		var list jobset.JobSetList
		g.Expect(s.Client.List(context.Background(), &list)).To(Succeed())
		for _, js := range list.Items {
			if strings.HasPrefix(js.Name, tj.Name+"-") {
				out = append(out, s.Name+"/"+js.Name)
			}
		}
	}
	return out
}

func clusterQueue(g Gomega, name string) *kueue.ClusterQueue {
	var cq kueue.ClusterQueue
	g.Expect(env.fleet.Hub.Client.Get(context.Background(), client.ObjectKey{Name: name}, &cq)).To(Succeed())
	return &cq
}

// shareOf is a ClusterQueue's weighted share as Kueue reports it.
func shareOf(g Gomega, name string) int64 {
	fs := clusterQueue(g, name).Status.FairSharing
	g.Expect(fs).NotTo(BeNil(), "fair sharing status of %s", name)
	return fs.WeightedShare
}

func borrowedOf(cq *kueue.ClusterQueue, flavor string) int64 {
	for _, f := range cq.Status.FlavorsUsage {
		if string(f.Name) != flavor {
			continue
		}
		for _, r := range f.Resources {
			if r.Name == gpu {
				return r.Borrowed.Value()
			}
		}
	}
	return -1
}

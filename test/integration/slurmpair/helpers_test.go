package slurmpair

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/slurm"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// makeRuntime creates a one-process torch ClusterTrainingRuntime.
func makeRuntime(t *testing.T, name string) {
	t.Helper()
	util.CreateForTest(t, env.fleet.Hub.Client, tytesting.MakeClusterTrainingRuntime(name).Spec(tytesting.TorchRuntimeSpec(1)).Obj())
}

// trainJob asks for nodes whole nodes (4 GPUs each) running argv.
func trainJob(name, runtime string, nodes int32, argv ...string) *trainer.TrainJob {
	return tytesting.MakeTrainJob(name, tenant).Queue(queue).
		RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).NumNodes(nodes).GPUsPerNode(4).
		Command(argv[:1], argv[1:]...).Obj()
}

// submit creates tj and, when the test ends, deletes it and waits until no
// Slurm job of it is active on either cluster.
func submit(t *testing.T, tj *trainer.TrainJob) *trainer.TrainJob {
	t.Helper()
	ctx := context.Background()
	util.CreateTrainJob(NewWithT(t), env.fleet.Hub.Client, tj)
	t.Cleanup(func() {
		_ = env.fleet.Hub.Client.Delete(ctx, tj, client.PropagationPolicy(metav1.DeletePropagationBackground))
		NewWithT(t).Eventually(func(g Gomega) {
			for _, s := range env.sites {
				g.Expect(activeJobsOf(g, s, tj)).To(BeEmpty(), "Slurm jobs of %s on %s", tj.Name, s.target)
			}
		}, slurmTimeout, util.Interval).Should(Succeed())
	})
	return tj
}

// ofTrainJob: the job's comment names the Dispatch, whose name starts
// with the Workload's, "trainjob-<name>-".
func ofTrainJob(j slurm.JobInfo, tj *trainer.TrainJob) bool {
	return strings.Contains(j.Comment, "/trainjob-"+tj.Name+"-")
}

func hasState(j slurm.JobInfo, state string) bool { return slices.Contains(j.JobState, state) }

// jobsOf lists the Slurm jobs of tj that the site's slurmctld knows.
func jobsOf(g Gomega, s *site, tj *trainer.TrainJob) []slurm.JobInfo {
	jobs, err := s.rest.Jobs(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	var out []slurm.JobInfo
	for _, j := range jobs {
		if ofTrainJob(j, tj) {
			out = append(out, j)
		}
	}
	return out
}

// activeJobsOf lists tj's Slurm jobs on the site that have not ended.
func activeJobsOf(g Gomega, s *site, tj *trainer.TrainJob) []slurm.JobInfo {
	var out []slurm.JobInfo
	for _, j := range jobsOf(g, s, tj) {
		if !slurm.Ended(&j) {
			out = append(out, j)
		}
	}
	return out
}

// dispatchOf waits until tj's latest Dispatch (highest attempt, not being
// deleted) satisfies check, and returns it.
func dispatchOf(t *testing.T, tj *trainer.TrainJob, check func(g Gomega, d *v1alpha1.Dispatch)) v1alpha1.Dispatch {
	t.Helper()
	g := NewWithT(t)
	wl := util.WorkloadOf(g, env.fleet.Hub.Client, tj)
	var d v1alpha1.Dispatch
	g.Eventually(func(g Gomega) {
		var list v1alpha1.DispatchList
		g.Expect(env.fleet.Hub.Client.List(context.Background(), &list,
			client.MatchingLabels{v1alpha1.LabelWorkloadUID: string(wl.UID)})).To(Succeed())
		found := false
		for _, x := range list.Items {
			if x.DeletionTimestamp.IsZero() && (!found || x.Spec.Attempt > d.Spec.Attempt) {
				d, found = x, true
			}
		}
		g.Expect(found).To(BeTrue(), "no Dispatch of %s", tj.Name)
		check(g, &d)
	}, slurmTimeout, util.Interval).Should(Succeed())
	return d
}

// countedByItsTarget waits until d's Target publishes a capacity reading
// that counts d's running job (Dispatch status.countedFromReading).
func countedByItsTarget(t *testing.T, d *v1alpha1.Dispatch) {
	t.Helper()
	ctx := context.Background()
	NewWithT(t).Eventually(func(g Gomega) {
		var cur v1alpha1.Dispatch
		g.Expect(env.fleet.Hub.Client.Get(ctx, client.ObjectKeyFromObject(d), &cur)).To(Succeed())
		g.Expect(cur.Status.CountedFromReading).To(BeNumerically(">", 0), "dispatch %s not stamped", d.Name)
		var tg v1alpha1.Target
		g.Expect(env.fleet.Hub.Client.Get(ctx, client.ObjectKey{Name: d.Spec.TargetName}, &tg)).To(Succeed())
		g.Expect(tg.Status.CapacityReading).To(BeNumerically(">=", cur.Status.CountedFromReading),
			"target %s has not published the reading that counts %s", tg.Name, d.Name)
	}, slurmTimeout, util.Interval).Should(Succeed())
}

func phaseIs(p v1alpha1.DispatchPhase) func(Gomega, *v1alpha1.Dispatch) {
	return func(g Gomega, d *v1alpha1.Dispatch) {
		g.Expect(d.Status.Phase).To(Equal(p), "dispatch %s on %s: %s %s", d.Name, d.Spec.TargetName, d.Status.Reason, d.Status.Message)
	}
}

// targetAvailable waits for the Target's Available condition.
func targetAvailable(t *testing.T, target string, want metav1.ConditionStatus) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		var tg v1alpha1.Target
		g.Expect(env.fleet.Hub.Client.Get(context.Background(), client.ObjectKey{Name: target}, &tg)).To(Succeed())
		c := apimeta.FindStatusCondition(tg.Status.Conditions, v1alpha1.TargetAvailable)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(want), "%s Available: %s %s", target, c.Reason, c.Message)
	}, slurmTimeout, util.Interval).Should(Succeed())
}

func trainJobComplete(t *testing.T, tj *trainer.TrainJob) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		var cur trainer.TrainJob
		g.Expect(env.fleet.Hub.Client.Get(context.Background(), client.ObjectKeyFromObject(tj), &cur)).To(Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(cur.Status.Conditions, trainer.TrainJobComplete)).To(BeTrue(), "conditions %v", cur.Status.Conditions)
	}, slurmTimeout, util.Interval).Should(Succeed())
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

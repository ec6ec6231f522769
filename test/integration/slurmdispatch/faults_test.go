package slurmdispatch

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobset "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// targetAvailable waits for the Slurm Target's Available condition.
func targetAvailable(t *testing.T, want metav1.ConditionStatus) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		var tg v1alpha1.Target
		g.Expect(env.fleet.Hub.Client.Get(context.Background(), client.ObjectKey{Name: targetName}, &tg)).To(Succeed())
		c := apimeta.FindStatusCondition(tg.Status.Conditions, v1alpha1.TargetAvailable)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(want), "Available: %s %s", c.Reason, c.Message)
	}, util.Timeout, util.Interval).Should(Succeed())
}

// TestSlurmOutageLosesNothing stops slurmrestd, then slurmctld, while a job
// runs and another is submitted: the target turns unavailable, the new job
// waits, and once the daemon is back both jobs complete, each exactly once.
func TestSlurmOutageLosesNothing(t *testing.T) {
	makeRuntime(t, "outage-slurm", tytesting.TorchRuntimeSpec(1))
	for _, daemon := range []string{"slurmrestd", "slurmctld"} {
		t.Run(daemon, func(t *testing.T) {
			ctx := context.Background()
			running := submit(t, trainJob("before-"+daemon, "outage-slurm", 1, 1, "sleep", "12.25"))
			dispatchOf(t, running, phaseIs(v1alpha1.DispatchRunning))
			// RUNNING is the batch script; its srun step needs slurmctld to
			// start, so the outage begins only once the command runs.
			waitForProcess(t, "sleep", "12.25")

			if err := env.cluster.StopDaemon(ctx, daemon); err != nil {
				t.Fatal(err)
			}
			restarted := false
			t.Cleanup(func() {
				if !restarted {
					_ = env.cluster.StartDaemon(ctx, daemon)
				}
			})
			targetAvailable(t, metav1.ConditionFalse)
			during := submit(t, trainJob("during-"+daemon, "outage-slurm", 1, 1, "true"))
			time.Sleep(5 * time.Second)

			if err := env.cluster.StartDaemon(ctx, daemon); err != nil {
				t.Fatal(err)
			}
			restarted = true
			targetAvailable(t, metav1.ConditionTrue)
			for _, tj := range []*trainer.TrainJob{running, during} {
				dispatchOf(t, tj, phaseIs(v1alpha1.DispatchSucceeded))
				trainJobCondition(t, tj, trainer.TrainJobComplete)
				// Counted in accounting: slurmctld forgets finished jobs.
				NewWithT(t).Expect(accountedJobsOf(NewWithT(t), tj)).To(HaveLen(1), "Slurm jobs of %s", tj.Name)
			}
		})
	}
}

// TestNodeFailureRequeuesWhenRestartsAllowed downs the node a job runs on.
// With restarts allowed (the runtime's failurePolicy.maxRestarts) Slurm
// requeues the job and it runs again; without, the TrainJob fails with
// reason NodeFail.
func TestNodeFailureRequeuesWhenRestartsAllowed(t *testing.T) {
	tests := []struct {
		name        string
		maxRestarts int32
	}{
		{"restarts-allowed", 1},
		{"no-restarts", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			spec := tytesting.TorchRuntimeSpec(1)
			if tc.maxRestarts > 0 {
				spec.Template.Spec.FailurePolicy = &jobset.FailurePolicy{MaxRestarts: tc.maxRestarts}
			}
			makeRuntime(t, "nodefail-"+tc.name, spec)
			tj := submit(t, trainJob("nodefail-"+tc.name, "nodefail-"+tc.name, 1, 1, "sleep", "600"))
			d := dispatchOf(t, tj, phaseIs(v1alpha1.DispatchRunning))
			id, _ := strconv.Atoi(d.Status.Remote.ID)
			j, err := serviceClient().Job(ctx, int32(id))
			if err != nil {
				t.Fatal(err)
			}
			node := j.Nodes
			if _, err := env.cluster.Exec(ctx, "scontrol", "update", "nodename="+node, "state=down", "reason=trainyard-test"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = env.cluster.Exec(ctx, "scontrol", "update", "nodename="+node, "state=resume") })

			if tc.maxRestarts == 0 {
				d = dispatchOf(t, tj, phaseIs(v1alpha1.DispatchFailed))
				if d.Status.Reason != v1alpha1.ReasonSlurmNodeFail {
					t.Errorf("reason = %s, want %s", d.Status.Reason, v1alpha1.ReasonSlurmNodeFail)
				}
				trainJobCondition(t, tj, trainer.TrainJobFailed)
				return
			}
			// Requeued by Slurm: the same job is pending again, and the
			// Dispatch says so instead of failing.
			d = dispatchOf(t, tj, func(g Gomega, d *v1alpha1.Dispatch) {
				g.Expect(d.Status.Phase).To(Equal(v1alpha1.DispatchSubmitted), "dispatch %s: %s", d.Name, d.Status.Message)
				g.Expect(d.Status.Reason).To(Equal(v1alpha1.ReasonSlurmRequeued))
			})
			// Slurm holds a requeued batch job back for a while (its begin
			// time); an operator's release makes it run again now. On the
			// emulated nodes the downed node may return at once and take the
			// job again while its old processes linger, which Slurm answers
			// with one more requeue (and, after a failed launch, a hold): release it
			// until it runs.
			NewWithT(t).Eventually(func(g Gomega) {
				j, err := serviceClient().Job(ctx, int32(id))
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(j.RestartCount).To(BeNumerically(">=", 1))
				if slices.Contains(j.JobState, "PENDING") {
					// A launch that failed that way may also leave the job held.
					_, _ = env.cluster.Exec(ctx, "scontrol", "release", strconv.Itoa(id))
					_, _ = env.cluster.Exec(ctx, "scontrol", "update", "jobid="+strconv.Itoa(id), "starttime=now")
				}
				g.Expect(j.JobState).To(ContainElement("RUNNING"))
			}, slurmTimeout, time.Second).Should(Succeed())
			d = dispatchOf(t, tj, phaseIs(v1alpha1.DispatchRunning))
			if d.Status.Remote.ID != strconv.Itoa(id) {
				t.Errorf("dispatch moved to job %s, want the requeued job %d", d.Status.Remote.ID, id)
			}
			NewWithT(t).Expect(slurmJobsOf(NewWithT(t), tj)).To(HaveLen(1))
		})
	}
}

// waitForProcess waits until a process of this machine (the harness's
// nodes run here) has exactly argv as its command line.
func waitForProcess(t *testing.T, argv ...string) {
	t.Helper()
	want := strings.Join(argv, "\x00") + "\x00"
	NewWithT(t).Eventually(func() bool {
		dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, f := range dirs {
			if b, err := os.ReadFile(f); err == nil && string(b) == want {
				return true
			}
		}
		return false
	}, slurmTimeout, util.Interval).Should(BeTrue(), "no process runs %q", argv)
}

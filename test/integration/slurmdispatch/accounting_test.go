package slurmdispatch

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/slurm"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// forgetTimeout bounds the wait for slurmctld to forget a finished job: the
// harness's MinJobAge (5 s) plus slurmctld's purge pass, about once a
// minute.
const forgetTimeout = 150 * time.Second

// TestJobThatEndedWhileTheAgentWasAway: jobs that end while the agent is
// stopped, and that slurmctld has forgotten by the time it is back, get
// their real outcome from accounting (slurmdbd through slurmrestd): one
// Succeeded, one Failed with its exit code, neither RemoteMissing.
func TestJobThatEndedWhileTheAgentWasAway(t *testing.T) {
	ctx := context.Background()
	makeRuntime(t, "away-slurm", tytesting.TorchRuntimeSpec(1))
	ok := submit(t, trainJob("away-ok", "away-slurm", 1, 1, "sleep", "10"))
	bad := submit(t, trainJob("away-bad", "away-slurm", 1, 1, "bash", "-c", "sleep 10; exit 7"))
	ids := map[string]int32{}
	for _, tj := range []*trainer.TrainJob{ok, bad} {
		d := dispatchOf(t, tj, phaseIs(v1alpha1.DispatchRunning))
		id, err := strconv.Atoi(d.Status.Remote.ID)
		if err != nil {
			t.Fatal(err)
		}
		ids[tj.Name] = int32(id)
	}

	agent := env.controllers.Agents[targetName]
	agent.Stop()
	started := false
	t.Cleanup(func() {
		if !started {
			_ = agent.Start()
		}
	})
	away := time.Now()
	NewWithT(t).Eventually(func(g Gomega) {
		for name, id := range ids {
			_, err := serviceClient().Job(ctx, id)
			g.Expect(errors.Is(err, slurm.ErrJobNotFound)).To(BeTrue(), "slurmctld still knows job %d of %s (err %v)", id, name, err)
		}
	}, forgetTimeout, time.Second).Should(Succeed())
	t.Logf("slurmctld forgot both jobs %s after the agent stopped", time.Since(away).Round(time.Second))
	for _, tj := range []*trainer.TrainJob{ok, bad} {
		dispatchOf(t, tj, phaseIs(v1alpha1.DispatchRunning)) // nobody has told the hub yet
	}

	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	started = true
	d := dispatchOf(t, ok, phaseIs(v1alpha1.DispatchSucceeded))
	if got := ptr.Deref(d.Status.ExitCode, -1); got != 0 {
		t.Errorf("%s: exit code %d, want 0", ok.Name, got)
	}
	trainJobCondition(t, ok, trainer.TrainJobComplete)
	d = dispatchOf(t, bad, phaseIs(v1alpha1.DispatchFailed))
	if got := ptr.Deref(d.Status.ExitCode, -1); got != 7 || d.Status.Reason != v1alpha1.ReasonRemoteFailed {
		t.Errorf("%s: exit code %d, reason %s (%s); want 7, %s", bad.Name, got, d.Status.Reason, d.Status.Message, v1alpha1.ReasonRemoteFailed)
	}
	trainJobCondition(t, bad, trainer.TrainJobFailed)
}

// accountedJobs lists the id of every Slurm job whose comment matches,
// from accounting: slurmctld forgets finished jobs after the harness's 5 s
// MinJobAge, slurmdbd keeps them.
func accountedJobs(g Gomega, match func(comment string) bool) []string {
	out, err := env.cluster.Exec(context.Background(), "sacct", "-a", "-X", "-n", "-P", "-o", "JobID,Comment", "-S", "2020-01-01")
	g.Expect(err).NotTo(HaveOccurred())
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if id, comment, _ := strings.Cut(line, "|"); match(comment) {
			ids = append(ids, id)
		}
	}
	return ids
}

// accountedJobsOf lists the ids of every Slurm job made for tj.
func accountedJobsOf(g Gomega, tj *trainer.TrainJob) []string {
	return accountedJobs(g, func(comment string) bool { return strings.Contains(comment, "/trainjob-"+tj.Name+"-") })
}

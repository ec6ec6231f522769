package slurmdispatch

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/slurm"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

func trainyardCLI(args ...string) (stdout, stderr string, code int) {
	return util.TrainyardCLI(env.fleet.Hub.Kubeconfig, args...)
}

// TestLogsThroughTheAgent: `trainyard logs` prints a Slurm job's output,
// read from its files by the agent and handed over through the hub, with
// --tail applied and stderr shown after stdout.
func TestLogsThroughTheAgent(t *testing.T) {
	makeRuntime(t, "logs-slurm", tytesting.TorchRuntimeSpec(1))
	tj := submit(t, trainJob("logs", "logs-slurm", 1, 1, "bash", "-c", "for i in 1 2 3 4 5; do echo line $i; done; echo oops >&2"))
	dispatchOf(t, tj, phaseIs(v1alpha1.DispatchSucceeded))

	out, errOut, code := trainyardCLI("logs", tj.Name, "-n", tenant, "--tail", "2")
	if code != 0 {
		t.Fatalf("logs exited %d: %s", code, errOut)
	}
	if !strings.Contains(out, "line 4\nline 5\n") || strings.Contains(out, "line 3") {
		t.Errorf("--tail 2 printed:\n%s\nwant the last two lines of stdout", out)
	}
	if !strings.Contains(out, ".err <==\noops\n") {
		t.Errorf("stderr is missing from:\n%s", out)
	}

	_, errOut, code = trainyardCLI("logs", tj.Name, "-n", tenant, "--replica", "node-0-1")
	if code != 1 || !strings.Contains(errOut, "one output for all its tasks") {
		t.Errorf("--replica on Slurm: exit %d, stderr %q; want exit 1 explaining Slurm's single output", code, errOut)
	}
}

// TestLogsRefuseASwappedOutputFile: a job that replaces its own output file
// with a symlink to a file its user cannot read does not get the agent to
// read that file for it.
func TestLogsRefuseASwappedOutputFile(t *testing.T) {
	makeRuntime(t, "swap-slurm", tytesting.TorchRuntimeSpec(1))
	swap := `echo innocent && ln -sfn /etc/shadow "$SLURM_JOB_NAME.$SLURM_JOB_ID.out"` // in the job's work dir
	tj := submit(t, trainJob("swapped", "swap-slurm", 1, 1, "bash", "-c", swap))
	dispatchOf(t, tj, phaseIs(v1alpha1.DispatchSucceeded))

	out, errOut, code := trainyardCLI("logs", tj.Name, "-n", tenant)
	if code != 1 || !strings.Contains(errOut, "symlink") {
		t.Errorf("logs of a swapped file: exit %d, stderr %q; want exit 1 refusing the symlink", code, errOut)
	}
	if strings.Contains(out, "root:") {
		t.Fatalf("the agent printed /etc/shadow:\n%s", out)
	}
}

// TestLogsOutliveSlurmctld: `trainyard logs` of a failed job still prints
// its output once slurmctld has forgotten the job (MinJobAge): the agent
// finds it through accounting and checks it against the user it recorded
// while slurmctld knew the job. Past the Target's outputRetentionDays it
// says how long logs are kept, not that the job is unknown.
func TestLogsOutliveSlurmctld(t *testing.T) {
	ctx := context.Background()
	makeRuntime(t, "forgot-slurm", tytesting.TorchRuntimeSpec(1))
	tj := submit(t, trainJob("forgot", "forgot-slurm", 1, 1, "bash", "-c", "echo step 1; echo step 2; echo out of memory >&2; exit 3"))
	d := dispatchOf(t, tj, func(g Gomega, d *v1alpha1.Dispatch) {
		phaseIs(v1alpha1.DispatchFailed)(g, d)
		g.Expect(d.Status.Remote.UserID).NotTo(BeNil(), "the agent recorded no user id for the job")
	})
	id, err := strconv.Atoi(d.Status.Remote.ID)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	NewWithT(t).Eventually(func(g Gomega) {
		_, err := serviceClient().Job(ctx, int32(id))
		g.Expect(errors.Is(err, slurm.ErrJobNotFound)).To(BeTrue(), "slurmctld still knows job %d (err %v)", id, err)
	}, forgetTimeout, time.Second).Should(Succeed())
	t.Logf("slurmctld forgot job %d %s after it failed", id, time.Since(start).Round(time.Second))
	if j, err := serviceClient().AccountedJob(ctx, int32(id), slurm.Comment(&d)); err == nil {
		t.Logf("accounting: working directory %s, stdout %q, stderr %q as asked", j.WorkDir, j.StandardOutput, j.StandardError)
	}

	out, errOut, code := trainyardCLI("logs", tj.Name, "-n", tenant)
	if code != 0 {
		t.Fatalf("logs of a job slurmctld forgot exited %d: %s", code, errOut)
	}
	// srun's own lines about the failed task may come before the task's
	// stderr in the .err file: only the order of the sections is fixed.
	_, stderr, hasErr := strings.Cut(out, ".err <==\n")
	if !strings.Contains(out, "step 1\nstep 2\n") || !hasErr || !strings.Contains(stderr, "out of memory\n") {
		t.Errorf("logs of a job slurmctld forgot printed:\n%s\nwant its stdout and stderr", out)
	}

	// Eight days later, as the agent's record says: past the default 7.
	ended := metav1.NewTime(time.Now().Add(-8 * 24 * time.Hour))
	patch := client.MergeFrom(d.DeepCopy())
	d.Status.CompletionTime = &ended
	NewWithT(t).Expect(env.fleet.Hub.Client.Status().Patch(ctx, &d, patch)).To(Succeed())
	out, errOut, code = trainyardCLI("logs", tj.Name, "-n", tenant)
	if code != 1 || !strings.Contains(errOut, "the logs are no longer kept") || !strings.Contains(errOut, "for 7 days") || strings.Contains(errOut, "404") {
		t.Errorf("logs past the retention: exit %d, stdout %q, stderr %q; want exit 1 saying logs are kept for 7 days", code, out, errOut)
	}
	t.Logf("past the retention: %s", strings.TrimSpace(errOut))
}

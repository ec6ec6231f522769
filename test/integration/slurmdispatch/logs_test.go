package slurmdispatch

import (
	"strings"
	"testing"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
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

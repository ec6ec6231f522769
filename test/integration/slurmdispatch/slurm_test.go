package slurmdispatch

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/slurm"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// slurmTimeout bounds waits on Slurm: each emulated job start forks a
// slurmstepd on a 2-core machine that also runs a control plane.
const slurmTimeout = 2 * time.Minute

// makeRuntime creates a ClusterTrainingRuntime from spec for the test.
func makeRuntime(t *testing.T, name string, spec trainer.TrainingRuntimeSpec) {
	t.Helper()
	util.CreateForTest(t, env.fleet.Hub.Client, tytesting.MakeClusterTrainingRuntime(name).Spec(spec).Obj())
}

func mlPolicy(spec trainer.TrainingRuntimeSpec, src trainer.MLPolicySource) trainer.TrainingRuntimeSpec {
	spec.MLPolicy.MLPolicySource = src
	return spec
}

func trainJob(name, runtime string, nodes int32, gpus int64, argv ...string) *trainer.TrainJob {
	return tytesting.MakeTrainJob(name, tenant).Queue(queue).
		RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).NumNodes(nodes).GPUsPerNode(gpus).
		Command(argv[:1], argv[1:]...).Obj()
}

// submit creates tj and, when the test ends, deletes it and waits until no
// live Slurm job of it is left.
func submit(t *testing.T, tj *trainer.TrainJob) *trainer.TrainJob {
	t.Helper()
	ctx := context.Background()
	util.CreateTrainJob(NewWithT(t), env.fleet.Hub.Client, tj)
	t.Cleanup(func() {
		_ = env.fleet.Hub.Client.Delete(ctx, tj, client.PropagationPolicy(metav1.DeletePropagationBackground))
		NewWithT(t).Eventually(func(g Gomega) {
			for _, j := range slurmJobsOf(g, tj) {
				g.Expect(slurm.Ended(&j)).To(BeTrue(), "Slurm job %d of %s is %v", j.JobID, tj.Name, j.JobState)
			}
		}, util.Timeout, util.Interval).Should(Succeed())
	})
	return tj
}

// slurmJobsOf lists the Slurm jobs made for tj: their comment names the
// Dispatch, whose name starts with the Workload's, "trainjob-<name>-"
// (remote names keep only the first characters of the TrainJob's name).
// Every test uses names of its own.
func slurmJobsOf(g Gomega, tj *trainer.TrainJob) []slurm.JobInfo {
	jobs, err := serviceClient().Jobs(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	var out []slurm.JobInfo
	for _, j := range jobs {
		if strings.Contains(j.Comment, "/trainjob-"+tj.Name+"-") {
			out = append(out, j)
		}
	}
	return out
}

// serviceClient reads the cluster as SlurmUser.
func serviceClient() *slurm.Client { return env.rest }

// dispatchOf waits for the TrainJob's one live Dispatch to satisfy check.
func dispatchOf(t *testing.T, tj *trainer.TrainJob, check func(g Gomega, d *v1alpha1.Dispatch)) v1alpha1.Dispatch {
	t.Helper()
	g := NewWithT(t)
	wl := util.WorkloadOf(g, env.fleet.Hub.Client, tj)
	var d v1alpha1.Dispatch
	g.Eventually(func(g Gomega) {
		var list v1alpha1.DispatchList
		g.Expect(env.fleet.Hub.Client.List(context.Background(), &list,
			client.MatchingLabels{v1alpha1.LabelWorkloadUID: string(wl.UID)})).To(Succeed())
		g.Expect(list.Items).To(HaveLen(1))
		d = list.Items[0]
		check(g, &d)
	}, slurmTimeout, util.Interval).Should(Succeed())
	return d
}

func phaseIs(p v1alpha1.DispatchPhase) func(Gomega, *v1alpha1.Dispatch) {
	return func(g Gomega, d *v1alpha1.Dispatch) {
		g.Expect(d.Status.Phase).To(Equal(p), "dispatch %s: %s: %s", d.Name, d.Status.Reason, d.Status.Message)
	}
}

// trainJobCondition waits for the hub TrainJob's condition typ to be True.
func trainJobCondition(t *testing.T, tj *trainer.TrainJob, typ string) metav1.Condition {
	t.Helper()
	var cond metav1.Condition
	NewWithT(t).Eventually(func(g Gomega) {
		var live trainer.TrainJob
		g.Expect(env.fleet.Hub.Client.Get(context.Background(), client.ObjectKeyFromObject(tj), &live)).To(Succeed())
		c := apimeta.FindStatusCondition(live.Status.Conditions, typ)
		g.Expect(c).NotTo(BeNil(), "TrainJob %s has no %s condition: %v", tj.Name, typ, live.Status.Conditions)
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		cond = *c
	}, slurmTimeout, util.Interval).Should(Succeed())
	return cond
}

// outputPath is where a job's stdout is, in the chroot: its user's work
// directory.
func outputPath(d v1alpha1.Dispatch, user string) string {
	return strings.ReplaceAll(workDir, "%u", user) + "/" + d.Status.Remote.Name + "." + d.Status.Remote.ID + ".out"
}

// output reads a finished job's stdout file.
func output(t *testing.T, d v1alpha1.Dispatch) string {
	t.Helper()
	path := env.cluster.Path(outputPath(d, slurmUser))
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("job output: %v", err)
	}
	return string(raw)
}

// torchProbe prints what each node's process sees of the torch wiring. It
// holds quotes, a $(...) and a newline: the tenant's argv reaches the node
// as data, so none of it is interpreted by a shell.
const torchProbe = `import os, pwd
e = os.environ
print("rank=%s nnodes=%s nproc=%s master=%s:%s user=%s probe='$(touch /tmp/pwned)'" % (
    e["PET_NODE_RANK"], e["PET_NNODES"], e["PET_NPROC_PER_NODE"], e["PET_MASTER_ADDR"], e["PET_MASTER_PORT"],
    pwd.getpwuid(os.getuid()).pw_name), flush=True)
`

// TestTorchJobCompletesOnSlurm: a torch-style TrainJob runs on two Slurm
// nodes as the administrator-mapped user, with rendezvous on the first node
// of the allocation, and completion reaches the hub TrainJob.
func TestTorchJobCompletesOnSlurm(t *testing.T) {
	makeRuntime(t, "torch-slurm", tytesting.TorchRuntimeSpec(1))
	tj := submit(t, trainJob("torch", "torch-slurm", 2, 2, "python3", "-c", torchProbe))
	d := dispatchOf(t, tj, phaseIs(v1alpha1.DispatchSucceeded))
	if d.Spec.TargetName != targetName || d.Status.Remote == nil || d.Status.Remote.Kind != slurm.RemoteKind {
		t.Fatalf("dispatch went to %s as %+v, want a Slurm job on %s", d.Spec.TargetName, d.Status.Remote, targetName)
	}
	if d.Status.ExitCode == nil || *d.Status.ExitCode != 0 {
		t.Errorf("exit code = %v, want 0", d.Status.ExitCode)
	}
	trainJobCondition(t, tj, trainer.TrainJobComplete)

	out := output(t, d)
	// The rendezvous port is the job's own (two jobs may share a node).
	id, err := strconv.Atoi(d.Status.Remote.ID)
	if err != nil {
		t.Fatalf("Slurm job id %q: %v", d.Status.Remote.ID, err)
	}
	port := strconv.Itoa(29500 + id%1000)
	lines := regexp.MustCompile(`rank=(\d) nnodes=(\d) nproc=(\d) master=(\S+):`+port+` user=(\S+) probe='\$\(touch /tmp/pwned\)'`).FindAllStringSubmatch(out, -1)
	if len(lines) != 2 {
		t.Fatalf("want one probe line per node, got:\n%s", out)
	}
	var ranks []string
	for _, l := range lines {
		ranks = append(ranks, l[1])
		if l[2] != "2" || l[3] != "2" || l[5] != slurmUser {
			t.Errorf("node saw nnodes=%s nproc=%s user=%s, want 2, 2, %s", l[2], l[3], l[5], slurmUser)
		}
		if l[4] != lines[0][4] || !strings.HasPrefix(l[4], "n") {
			t.Errorf("master addresses %s and %s differ or are not a node", l[4], lines[0][4])
		}
	}
	slices.Sort(ranks)
	if !slices.Equal(ranks, []string{"0", "1"}) {
		t.Errorf("node ranks = %v, want 0 and 1", ranks)
	}
	if _, err := os.Stat(env.cluster.Path("/tmp/pwned")); err == nil {
		t.Error("tenant text was executed by a shell: /tmp/pwned exists")
	}
}

// TestMPIJobRunsAcrossTwoNodes: an MPI TrainJob runs a real Open MPI
// program with srun --mpi=pmix, two ranks on each of two nodes, and the
// ranks talk to each other (an allreduce).
func TestMPIJobRunsAcrossTwoNodes(t *testing.T) {
	spec := mlPolicy(tytesting.TorchRuntimeSpec(1), trainer.MLPolicySource{MPI: &trainer.MPIMLPolicySource{NumProcPerNode: ptr.To[int32](2)}})
	makeRuntime(t, "mpi-slurm", spec)
	tj := submit(t, trainJob("mpi", "mpi-slurm", 2, 1, "/home/"+slurmUser+"/mpi-hello"))
	d := dispatchOf(t, tj, phaseIs(v1alpha1.DispatchSucceeded))
	trainJobCondition(t, tj, trainer.TrainJobComplete)
	out := output(t, d)
	lines := regexp.MustCompile(`hello rank=(\d) size=(\d) node=(n\d) sum=(\d+)`).FindAllStringSubmatch(out, -1)
	if len(lines) != 4 {
		t.Fatalf("want 4 ranks, got:\n%s", out)
	}
	nodes := map[string]int{}
	for _, l := range lines {
		if l[2] != "4" || l[4] != "6" {
			t.Errorf("rank %s saw size=%s sum=%s, want 4 and 6 (0+1+2+3)", l[1], l[2], l[4])
		}
		nodes[l[3]]++
	}
	if len(nodes) != 2 {
		t.Errorf("ranks ran on %v, want two per node on two nodes", nodes)
	}
}

// TestFailingJobShowsExitCode: a script that exits 3 fails the TrainJob,
// and the exit code reaches the Dispatch and the condition message.
func TestFailingJobShowsExitCode(t *testing.T) {
	makeRuntime(t, "fail-slurm", tytesting.TorchRuntimeSpec(1))
	tj := submit(t, trainJob("failing", "fail-slurm", 1, 1, "bash", "-c", "echo failing on purpose; exit 3"))
	d := dispatchOf(t, tj, phaseIs(v1alpha1.DispatchFailed))
	if d.Status.ExitCode == nil || *d.Status.ExitCode != 3 {
		t.Errorf("exit code = %v, want 3", d.Status.ExitCode)
	}
	cond := trainJobCondition(t, tj, trainer.TrainJobFailed)
	if !strings.Contains(cond.Message, "exit code 3") {
		t.Errorf("Failed condition message %q does not give the exit code", cond.Message)
	}
}

// TestCancelledInSlurmShowsCancelled: an operator's scancel ends the
// TrainJob Failed with reason RemoteCancelled.
func TestCancelledInSlurmShowsCancelled(t *testing.T) {
	makeRuntime(t, "cancel-slurm", tytesting.TorchRuntimeSpec(1))
	tj := submit(t, trainJob("scancelled", "cancel-slurm", 1, 1, "sleep", "600"))
	d := dispatchOf(t, tj, phaseIs(v1alpha1.DispatchRunning))
	if _, err := env.cluster.Exec(context.Background(), "scancel", d.Status.Remote.ID); err != nil {
		t.Fatal(err)
	}
	dispatchOf(t, tj, phaseIs(v1alpha1.DispatchCancelled))
	cond := trainJobCondition(t, tj, trainer.TrainJobFailed)
	if cond.Reason != v1alpha1.ReasonRemoteCancelled {
		t.Errorf("Failed reason = %s, want %s", cond.Reason, v1alpha1.ReasonRemoteCancelled)
	}
}

// TestDeletingTrainJobCancelsSlurmJob: deleting the hub TrainJob cancels
// its running Slurm job, and the Workload is released only after that.
func TestDeletingTrainJobCancelsSlurmJob(t *testing.T) {
	g := NewWithT(t)
	makeRuntime(t, "delete-slurm", tytesting.TorchRuntimeSpec(1))
	tj := submit(t, trainJob("deleted", "delete-slurm", 1, 1, "sleep", "600"))
	d := dispatchOf(t, tj, phaseIs(v1alpha1.DispatchRunning))
	wl := util.WorkloadOf(g, env.fleet.Hub.Client, tj)
	g.Expect(env.fleet.Hub.Client.Delete(context.Background(), tj, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	id, _ := strconv.Atoi(d.Status.Remote.ID)
	g.Eventually(func(g Gomega) {
		j, err := serviceClient().Job(context.Background(), int32(id))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(j.JobState).To(ContainElement("CANCELLED"))
		g.Expect(slurm.Ended(j)).To(BeTrue())
	}, slurmTimeout, util.Interval).Should(Succeed())
	g.Eventually(func() bool {
		err := env.fleet.Hub.Client.Get(context.Background(), client.ObjectKeyFromObject(wl), &kueue.Workload{})
		return client.IgnoreNotFound(err) == nil && err != nil
	}, util.Timeout, util.Interval).Should(BeTrue(), "workload outlived its cancelled job")
}

// fluxStandIn records how the Flux launcher calls flux, and emulates it:
// `flux start CMD` runs CMD on the first broker only, `flux run -N n ARGV`
// runs ARGV. Flux is not packaged for Debian, so the real one cannot run here.
const fluxStandIn = `#!/bin/bash
printf '%s\n' "node=$SLURMD_NODENAME procid=$SLURM_PROCID argv=$*" >> /tmp/flux-calls.log
case "$1" in
start) shift; [ "$SLURM_PROCID" = 0 ] || exit 0; exec "$@" ;;
run) shift; [ "$1" = -N ] || exit 64; shift 2; exec "$@" ;;
*) exit 64 ;;
esac
`

// TestFluxLauncherCommands: the Flux launcher starts one broker per node
// and runs the tenant argv once, across all nodes, with flux run -N.
func TestFluxLauncherCommands(t *testing.T) {
	standIn := env.cluster.Path("/usr/local/bin/flux")
	calls := env.cluster.Path("/tmp/flux-calls.log")
	_ = os.Remove(calls)
	if err := os.WriteFile(standIn, []byte(fluxStandIn), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(standIn) })
	if err := os.WriteFile(calls, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(calls, 0o666)

	spec := mlPolicy(tytesting.TorchRuntimeSpec(1), trainer.MLPolicySource{Flux: &trainer.FluxMLPolicySource{}})
	makeRuntime(t, "flux-slurm", spec)
	tj := submit(t, trainJob("flux", "flux-slurm", 2, 1, "echo", "hello from flux", "a;b"))
	d := dispatchOf(t, tj, phaseIs(v1alpha1.DispatchSucceeded))
	raw, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	var starts, runs []string
	for _, l := range lines {
		switch {
		case strings.Contains(l, " argv=start flux run -N 2 echo hello from flux a;b"):
			starts = append(starts, l)
		case strings.Contains(l, " argv=run -N 2 echo hello from flux a;b"):
			runs = append(runs, l)
		default:
			t.Errorf("unexpected flux call %q", l)
		}
	}
	if len(starts) != 2 || len(runs) != 1 {
		t.Errorf("flux calls: %d starts (want one per node), %d runs (want 1):\n%s", len(starts), len(runs), raw)
	}
	if out := output(t, d); !strings.Contains(out, "hello from flux a;b") {
		t.Errorf("output %q lacks the tenant's words", out)
	}
}

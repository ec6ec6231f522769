package slurmdispatch

import (
	"context"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueueconstants "sigs.k8s.io/kueue/pkg/controller/constants"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// TestTorchrunAllReduce runs real PyTorch: torchrun, started by trainyard's
// torchrun launcher on 2 Slurm nodes, rendezvous through the PET_*
// variables, and a gloo all-reduce whose result both ranks print, read
// back with `trainyard logs`. Every port of the rendezvous range but one
// is held on the nodes, so whatever its Slurm job id the job finds its own
// port taken, as a job 1000 ids apart on the same first node would hold
// it, and must rendezvous on the free one.
func TestTorchrunAllReduce(t *testing.T) {
	const free = 30499
	holdRendezvousPortsBut(t, free)
	makeRuntime(t, "torch-real-slurm", tytesting.TorchRuntimeSpec(1))
	tj := trainJob("allreduce", "torch-real-slurm", 2, 1, "torchrun", "--no-python", "python3", "-c", sandbox.AllReduceProgram)
	// All emulated nodes are one host: gloo must use loopback.
	tj.Spec.Trainer.Env = []corev1.EnvVar{{Name: "GLOO_SOCKET_IFNAME", Value: "lo"}}
	tj = submit(t, tj)
	d := dispatchOf(t, tj, phaseIs(v1alpha1.DispatchSucceeded))
	if id, _ := strconv.Atoi(d.Status.Remote.ID); 29500+id%1000 == free {
		t.Logf("Slurm job %d's own port is the free one: the job did not have to skip", id)
	}

	out, errOut, code := trainyardCLI("logs", tj.Name, "-n", tenant)
	if code != 0 {
		t.Fatalf("logs exited %d: %s", code, errOut)
	}
	for _, want := range []string{"allreduce rank=0 world=2 sum=3", "allreduce rank=1 world=2 sum=3"} {
		if !strings.Contains(out, want) {
			t.Errorf("output of Slurm job %s lacks %q:\n%s", d.Status.Remote.ID, want, out)
		}
	}
}

// TestUpstreamMultiNodeExample runs Trainer's examples/yaml/01-multi-node.yaml
// on its shipped torch-distributed runtime, both unchanged but for the
// namespace and the Kueue queue: torchrun --no-python python3 -c on 3 Slurm
// nodes, every rank reporting the whole world.
func TestUpstreamMultiNodeExample(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	rt, err := tytesting.ShippedRuntime("manifests/base/runtimes/torch_distributed.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(env.fleet.Hub.Client.Create(ctx, rt)).To(Succeed())
	t.Cleanup(func() { _ = env.fleet.Hub.Client.Delete(ctx, rt) })
	tj, err := tytesting.ShippedTrainJob("examples/yaml/01-multi-node.yaml", tenant)
	g.Expect(err).NotTo(HaveOccurred())
	if tj.Labels == nil {
		tj.Labels = map[string]string{}
	}
	tj.Labels[kueueconstants.QueueLabel] = queue
	tj = submit(t, tj)
	d := dispatchOf(t, tj, phaseIs(v1alpha1.DispatchSucceeded))

	out, errOut, code := trainyardCLI("logs", tj.Name, "-n", tenant)
	if code != 0 {
		t.Fatalf("logs exited %d: %s", code, errOut)
	}
	m := regexp.MustCompile(`WORLD_SIZE: (\d+)`).FindStringSubmatch(out)
	g.Expect(m).NotTo(BeNil(), "output of Slurm job %s:\n%s", d.Status.Remote.ID, out)
	world, _ := strconv.Atoi(m[1])
	g.Expect(world).To(BeNumerically(">=", 3), "3 nodes, at least one rank each")
	for r := 0; r < world; r++ {
		g.Expect(out).To(MatchRegexp(`(?m)^RANK: %d$`, r), "rank %d of %d", r, world)
	}
}

// holdRendezvousPortsBut listens on every port of the torchrun launcher's
// rendezvous range (29500-30499) but free, on the address the emulated
// nodes have (127.0.0.1), until the test ends. A port something else
// already listens on counts as held.
func holdRendezvousPortsBut(t *testing.T, free int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(free))
	if err != nil {
		t.Skipf("port %d is taken on this machine: %v", free, err)
	}
	l.Close()
	for p := 29500; p <= 30499; p++ {
		if p == free {
			continue
		}
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
			t.Cleanup(func() { l.Close() })
		}
	}
}

// TestSandboxRuntimeRunsJobsWithoutACommand: a TrainJob that names the
// sandbox's sample runtime and brings nothing else, no trainer section, so
// no command and no GPUs, runs the runtime's own command on a Slurm node's
// real PyTorch and succeeds, as a newcomer's first job in `make dev-up`
// does wherever placement sends it.
func TestSandboxRuntimeRunsJobsWithoutACommand(t *testing.T) {
	g := NewWithT(t)
	rt := sandbox.SampleClusterRuntime()
	util.CreateForTest(t, env.fleet.Hub.Client, rt)
	tj := &trainer.TrainJob{
		ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: tenant, Labels: map[string]string{kueueconstants.QueueLabel: queue}},
		Spec:       trainer.TrainJobSpec{RuntimeRef: trainer.RuntimeRef{Name: rt.Name}},
	}
	tj = submit(t, tj)
	d := dispatchOf(t, tj, phaseIs(v1alpha1.DispatchSucceeded))

	out, errOut, code := trainyardCLI("logs", tj.Name, "-n", tenant)
	if code != 0 {
		t.Fatalf("logs exited %d: %s", code, errOut)
	}
	g.Expect(out).To(MatchRegexp(`torch \S+ node rank 0 of 1`), "output of Slurm job %s", d.Status.Remote.ID)
}

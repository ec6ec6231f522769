package slurmdispatch

import (
	"context"
	"os"
	"strings"
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/slurm"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/registry"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// imageMarker is in the test image only: a task that prints it ran in the
// container, not on the bare node.
const imageMarker = "built by trainyard's slurmdispatch suite"

// containerProbe runs in the image's /bin/sh (dash): it prints the node's
// rank, the marker, whether Slurm's binaries are visible (they are not in
// the image) and writes into the work directory the Target binds in.
const containerProbe = `set -eu
if [ -e /usr/sbin/slurmd ]; then where=bare-node; else where=container; fi
echo "oci rank=$PET_NODE_RANK nnodes=$PET_NNODES in=$where image=$(cat /etc/trainyard-image)"
echo "rank $PET_NODE_RANK" > "$TRAINYARD_WORKDIR/oci-probe.$PET_NODE_RANK"
`

// TestOCIContainers: with containerRuntime OCI, a TrainJob naming an image
// in a registry on loopback runs inside that image on 2 Slurm nodes (the
// batch script pulls it with skopeo and unpacks it with umoci, srun
// --container runs each task with crun, rootless, as the mapped user), and
// a TrainJob naming an image the registry does not have fails with the
// reason. The image is built here from the chroot's own dash, cat and libc.
func TestOCIContainers(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	reg, err := registry.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = reg.Close() })
	enableOCI(t, reg.Addr)
	ref, err := reg.Push(ctx, "trainyard/probe:v1", registry.ShellImage(env.cluster.Root, imageMarker))
	g.Expect(err).NotTo(HaveOccurred())
	setContainerRuntime(t, v1alpha1.ContainerRuntimeOCI)
	makeRuntime(t, "oci-slurm", tytesting.TorchRuntimeSpec(1))

	t.Run("runs in the image on 2 nodes", func(t *testing.T) {
		tj := trainJob("oci-probe", "oci-slurm", 2, 1, "/bin/sh", "-c", containerProbe)
		tj.Spec.Trainer.Image = &ref
		tj = submit(t, tj)
		d := dispatchOf(t, tj, phaseIs(v1alpha1.DispatchSucceeded))
		trainJobCondition(t, tj, trainer.TrainJobComplete)
		out, errOut, code := trainyardCLI("logs", tj.Name, "-n", tenant)
		if code != 0 {
			t.Fatalf("logs exited %d: %s", code, errOut)
		}
		for _, rank := range []string{"0", "1"} {
			want := "oci rank=" + rank + " nnodes=2 in=container image=" + imageMarker
			if !strings.Contains(out, want) {
				t.Errorf("output of Slurm job %s lacks %q:\n%s", d.Status.Remote.ID, want, out)
			}
			probe := strings.ReplaceAll(workDir, "%u", slurmUser) + "/oci-probe." + rank
			if o, err := env.cluster.Exec(ctx, "stat", "-c", "%U", probe); err != nil || strings.TrimSpace(string(o)) != slurmUser {
				t.Errorf("rank %s wrote no file owned by %s into the bound work directory: %q, %v", rank, slurmUser, o, err)
			}
		}
	})

	t.Run("a hostile image reference is refused before it runs", func(t *testing.T) {
		hostile := "$(touch /tmp/pwned-by-image); " + ref
		tj := trainJob("oci-hostile", "oci-slurm", 2, 1, "/bin/sh", "-c", "echo must not run")
		tj.Spec.Trainer.Image = &hostile
		tj = submit(t, tj)
		cond := trainJobCondition(t, tj, trainer.TrainJobFailed)
		if cond.Reason != v1alpha1.ReasonDispatchRejected || !strings.Contains(cond.Message, "is not an image reference") {
			t.Errorf("Failed condition %s: %q, want %s naming the image", cond.Reason, cond.Message, v1alpha1.ReasonDispatchRejected)
		}
		if _, err := os.Stat(env.cluster.Path("/tmp/pwned-by-image")); err == nil {
			t.Error("the image reference ran as shell code")
		}
	})

	t.Run("a missing image fails with the reason", func(t *testing.T) {
		missing := reg.Addr + "/trainyard/absent:v1"
		tj := trainJob("oci-absent", "oci-slurm", 2, 1, "/bin/sh", "-c", "echo must not run")
		tj.Spec.Trainer.Image = &missing
		tj = submit(t, tj)
		d := dispatchOf(t, tj, phaseIs(v1alpha1.DispatchFailed))
		if d.Status.Reason != v1alpha1.ReasonContainerImage || d.Status.ExitCode == nil || *d.Status.ExitCode != slurm.ExitImageUnavailable {
			t.Errorf("Dispatch failed with %s, exit code %v: %s; want %s, exit code %d", d.Status.Reason, d.Status.ExitCode, d.Status.Message,
				v1alpha1.ReasonContainerImage, slurm.ExitImageUnavailable)
		}
		cond := trainJobCondition(t, tj, trainer.TrainJobFailed)
		if !strings.Contains(cond.Message, "container image could not be pulled") {
			t.Errorf("Failed condition message %q does not say the image could not be pulled", cond.Message)
		}
		out, _, _ := trainyardCLI("logs", tj.Name, "-n", tenant)
		if !strings.Contains(out, "trainyard: cannot pull or unpack the image "+missing) || strings.Contains(out, "must not run") {
			t.Errorf("the job's output does not name the image, or the command ran:\n%s", out)
		}
	})
}

// enableOCI lets the harness cluster run OCI containers and pull from the
// loopback registry at addr.
func enableOCI(t *testing.T, addr string) {
	t.Helper()
	if err := env.cluster.EnableOCI(context.Background(), addr); err != nil {
		t.Fatal(err)
	}
}

// setContainerRuntime switches the suite's Target to rt until the test ends.
// A Target that runs containers has no host environment: it is dropped
// meanwhile.
func setContainerRuntime(t *testing.T, rt v1alpha1.ContainerRuntime) {
	t.Helper()
	updateTarget(t, func(s *v1alpha1.TargetSpec) {
		s.Slurm.ContainerRuntime = rt
		if s.RunsContainers() {
			s.Images = nil
		}
	})
}

// updateTarget changes the suite's Target's spec until the test ends, then
// puts the spec back as it was.
func updateTarget(t *testing.T, change func(*v1alpha1.TargetSpec)) {
	t.Helper()
	ctx := context.Background()
	var before *v1alpha1.TargetSpec
	set := func(change func(*v1alpha1.TargetSpec)) error {
		var tg v1alpha1.Target
		if err := env.fleet.Hub.Client.Get(ctx, client.ObjectKey{Name: targetName}, &tg); err != nil {
			return err
		}
		if before == nil {
			before = tg.Spec.DeepCopy()
		}
		change(&tg.Spec)
		return env.fleet.Hub.Client.Update(ctx, &tg)
	}
	// The agent writes the Target's status meanwhile: retry on conflicts.
	NewWithT(t).Eventually(func() error { return set(change) }, util.Timeout, util.Interval).Should(Succeed())
	t.Cleanup(func() {
		restore := func(s *v1alpha1.TargetSpec) { *s = *before }
		NewWithT(t).Eventually(func() error { return set(restore) }, util.Timeout, util.Interval).Should(Succeed())
	})
}

package slurm

import (
	"errors"
	"strings"
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"k8s.io/utils/ptr"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// hostileImages would run code, read as options or climb paths if an image
// reference ever reached a shell, a command line or a file name as text.
var hostileImages = []string{
	"$(touch /tmp/pwned)", "`id`", "img; touch /tmp/pwned", "img && id", "img|id", "img\nid", "-v", "--help",
	"--container-mounts=/:/host", "docker://evil", "img:tag 'x'", `img"`, "../../etc/passwd", "/abs/path",
	"img:tag#frag", "img@sha256:short", "UPPER/case", "img:" + strings.Repeat("t", 129), "", " ", "img\x00x",
	"registry.example:99999999/img", "user@registry/img",
}

func TestValidImage(t *testing.T) {
	for _, ok := range []string{
		"busybox", "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime", "nvcr.io/nvidia/pytorch:24.01-py3",
		"127.0.0.1:5000/trainyard/job:v1", "localhost:5000/a/b/c", "ghcr.io/kubeflow/trainer/torchtune-trainer",
		"registry.example.com/team_a/img__x-y.z:latest@sha256:" + strings.Repeat("ab", 32),
	} {
		if err := ValidImage(ok); err != nil {
			t.Errorf("ValidImage(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range hostileImages {
		if err := ValidImage(bad); err == nil {
			t.Errorf("ValidImage(%q) = nil, want an error", bad)
		}
	}
}

// containerTarget is target() with runtime rt, a work directory and one
// administrator mount.
func containerTarget(rt v1alpha1.ContainerRuntime) *v1alpha1.Target {
	tg := target().Obj()
	tg.Spec.Slurm.ContainerRuntime = rt
	tg.Spec.Slurm.WorkDir = "/scratch/%u/trainyard"
	tg.Spec.Slurm.ContainerMounts = []v1alpha1.SlurmContainerMount{{Source: "/datasets", Destination: "/data", ReadOnly: true}}
	return tg
}

func imageJob(image string, argv ...string) *trainer.TrainJob {
	tj := tytesting.MakeTrainJob("train", "team-a").Command(argv[:1], argv[1:]...).Obj()
	tj.Spec.Trainer.Image = ptr.To(image)
	return tj
}

// TestRenderContainers: the image and the mounts reach the job as data, in
// each runtime's own syntax, and the script is the runtime's fixed one.
func TestRenderContainers(t *testing.T) {
	for _, tc := range []struct {
		rt         v1alpha1.ContainerRuntime
		image      string
		wantImage  string
		wantMounts string
	}{
		{v1alpha1.ContainerRuntimeOCI, "127.0.0.1:5000/t/job:v1", "127.0.0.1:5000/t/job:v1",
			`{"destination":"/scratch/svc_a/trainyard","type":"bind","source":"/scratch/svc_a/trainyard","options":["rbind","nosuid","nodev"]},` +
				`{"destination":"/data","type":"bind","source":"/datasets","options":["rbind","nosuid","nodev","ro"]},`},
		{v1alpha1.ContainerRuntimePyxis, "nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io#nvidia/pytorch:24.01-py3",
			"/scratch/svc_a/trainyard:/scratch/svc_a/trainyard,/datasets:/data:ro"},
		{v1alpha1.ContainerRuntimePyxis, "pytorch/pytorch:2.7.1", "pytorch/pytorch:2.7.1",
			"/scratch/svc_a/trainyard:/scratch/svc_a/trainyard,/datasets:/data:ro"},
		{v1alpha1.ContainerRuntimeApptainer, "ghcr.io/x/y:1", "ghcr.io/x/y:1",
			"/scratch/svc_a/trainyard:/scratch/svc_a/trainyard,/datasets:/data:ro"},
	} {
		t.Run(string(tc.rt)+"/"+tc.image, func(t *testing.T) {
			j, err := Render(dispatch(caseSpec{tj: imageJob(tc.image, "python3", "train.py")}), containerTarget(tc.rt))
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := envValue(j.Env, EnvImage); got != tc.wantImage {
				t.Errorf("%s = %q, want %q", EnvImage, got, tc.wantImage)
			}
			if got, _ := envValue(j.Env, EnvContainerMounts); got != tc.wantMounts {
				t.Errorf("%s = %q, want %q", EnvContainerMounts, got, tc.wantMounts)
			}
			if j.Script != ScriptFor(tc.rt, v1alpha1.LauncherTorchrun) || j.Script == Script(v1alpha1.LauncherTorchrun) {
				t.Error("the job does not run the runtime's own torchrun script")
			}
		})
	}
	// The runtime's node container image is used when the job names none.
	j, err := Render(dispatch(caseSpec{tj: tytesting.MakeTrainJob("train", "team-a").Command([]string{"python3"}).Obj()}), containerTarget(v1alpha1.ContainerRuntimeApptainer))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := envValue(j.Env, EnvImage); got != "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime" {
		t.Errorf("image from the runtime = %q", got)
	}
}

func twoNodes(tj *trainer.TrainJob) *trainer.TrainJob {
	tj.Spec.Trainer.NumNodes = ptr.To[int32](2)
	return tj
}

// TestRenderContainerRefusals: what a container runtime cannot run, and
// every hostile image, is refused with the reason.
func TestRenderContainerRefusals(t *testing.T) {
	mpi := tytesting.TorchRuntimeSpec(1)
	mpi.MLPolicy.MLPolicySource = trainer.MLPolicySource{MPI: &trainer.MPIMLPolicySource{}}
	flux := tytesting.TorchRuntimeSpec(1)
	flux.MLPolicy.MLPolicySource = trainer.MLPolicySource{Flux: &trainer.FluxMLPolicySource{}}
	ok := "registry.example/img:1"
	badMount := containerTarget(v1alpha1.ContainerRuntimePyxis)
	badMount.Spec.Slurm.ContainerMounts = []v1alpha1.SlurmContainerMount{{Source: "/a,b", Destination: "/c"}}
	cases := map[string]struct {
		target *v1alpha1.Target
		c      caseSpec
		want   string
	}{
		"Flux in a container":       {containerTarget(v1alpha1.ContainerRuntimePyxis), caseSpec{tj: imageJob(ok, "x"), rt: flux}, "the Flux launcher does not run in containers"},
		"MPI in OCI":                {containerTarget(v1alpha1.ContainerRuntimeOCI), caseSpec{tj: imageJob(ok, "x"), rt: mpi}, "the MPI launcher does not run in OCI containers"},
		"mpirun in Apptainer":       {containerTarget(v1alpha1.ContainerRuntimeApptainer), caseSpec{tj: imageJob(ok, "mpirun", "x"), rt: mpi}, "mpirun would start the ranks from the batch host"},
		"a mount path with a comma": {badMount, caseSpec{tj: imageJob(ok, "x")}, `"/a,b" is not a clean absolute path`},
		"no image":                  {containerTarget(v1alpha1.ContainerRuntimeOCI), caseSpec{tj: imageJob("", "x")}, "containerRuntime OCI runs the trainer's image: no image"},
	}
	for _, rt := range []v1alpha1.ContainerRuntime{v1alpha1.ContainerRuntimeOCI, v1alpha1.ContainerRuntimePyxis, v1alpha1.ContainerRuntimeApptainer} {
		for i, img := range hostileImages {
			if img == "" {
				continue
			}
			cases[string(rt)+" hostile image "+strings.Repeat("#", i)] = struct {
				target *v1alpha1.Target
				c      caseSpec
				want   string
			}{containerTarget(rt), caseSpec{tj: imageJob(img, "x")}, "is not an image reference"}
		}
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Render(dispatch(tc.c), tc.target)
			if !errors.Is(err, backends.ErrRejected) {
				t.Fatalf("err = %v, want a refusal", err)
			}
			if why := backends.RejectionReason(err); !strings.Contains(why, tc.want) {
				t.Errorf("refusal %q does not contain %q", why, tc.want)
			}
		})
	}
}

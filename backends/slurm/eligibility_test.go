package slurm

import (
	"strings"
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// TestRenderRefusesWhatSlurmCannotRun: what a cluster does not offer and
// what a batch script has no counterpart for are refusals, with the reason.
func TestRenderRefusesWhatSlurmCannotRun(t *testing.T) {
	flux := tytesting.TorchRuntimeSpec(1)
	flux.MLPolicy.MLPolicySource = trainer.MLPolicySource{Flux: &trainer.FluxMLPolicySource{}}
	withInit := tytesting.TorchRuntimeSpec(1)
	initJob := withInit.Template.Spec.ReplicatedJobs[0]
	initJob.Name = "dataset-initializer"
	initJob.Template.Labels = map[string]string{"trainer.kubeflow.org/trainjob-ancestor-step": "dataset-initializer"}
	withInit.Template.Spec.ReplicatedJobs = append([]jobsetv1alpha2.ReplicatedJob{initJob}, withInit.Template.Spec.ReplicatedJobs...)
	withClaims := tytesting.TorchRuntimeSpec(1)
	withClaims.Template.Spec.VolumeClaimPolicies = []jobsetv1alpha2.VolumeClaimPolicy{{}}
	noCommand := tytesting.TorchRuntimeSpec(1)
	for i := range noCommand.Template.Spec.ReplicatedJobs {
		for j := range noCommand.Template.Spec.ReplicatedJobs[i].Template.Spec.Template.Spec.Containers {
			c := &noCommand.Template.Spec.ReplicatedJobs[i].Template.Spec.Template.Spec.Containers[j]
			c.Command, c.Args = nil, nil
		}
	}
	cmd := tytesting.MakeTrainJob("train", "team-a").Command([]string{"python3"}, "train.py").Obj()

	cases := map[string]struct {
		target *v1alpha1.Target
		c      caseSpec
		want   string
	}{
		"Flux where the cluster lists no launchers": {
			target: tytesting.MakeSlurmTarget("hpc", "a100", "gpu").SlurmAccount(v1alpha1.SlurmAccount{Namespace: "team-a", User: "a"}).Obj(),
			c:      caseSpec{tj: cmd, rt: flux}, want: "the Flux launcher is not offered by this cluster",
		},
		"Flux where the cluster lists others": {
			target: target().SlurmLaunchers(v1alpha1.LauncherTorchrun).Obj(),
			c:      caseSpec{tj: cmd, rt: flux}, want: "the Flux launcher is not offered by this cluster",
		},
		"an initializer step": {
			target: target().Obj(), c: caseSpec{tj: cmd, rt: withInit},
			want: "its dataset-initializer step (replicated job dataset-initializer) runs only on Kubernetes spokes",
		},
		"volume claims": {
			target: target().Obj(), c: caseSpec{tj: cmd, rt: withClaims}, want: "its 1 volume claim policies run only on Kubernetes spokes",
		},
		// Issue 26: a converted PyTorchJob's image was dropped on a host
		// that had none of what the image holds.
		"a trainer image the host does not stand for": {
			target: target().Obj(), c: caseSpec{tj: imageJob("docker.io/kubeflowkatib/pytorch-mnist:v1", "python3", "mnist.py"), rt: tytesting.TorchRuntimeSpec(1)},
			want: `image "docker.io/kubeflowkatib/pytorch-mnist:v1" cannot run here: this target runs commands on its nodes' host, with no container runtime, and its host environment stands only for docker.io/pytorch/pytorch:*, mpioperator/* (spec.images.hostEnvironment)`,
		},
		"the runtime's image where the host stands for none": {
			target: tytesting.MakeSlurmTarget("hpc", "a100", "gpu").SlurmAccount(v1alpha1.SlurmAccount{Namespace: "team-a", User: "a"}).Obj(),
			c:      caseSpec{tj: cmd, rt: tytesting.TorchRuntimeSpec(1)},
			want:   `image "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime" cannot run here: this target runs commands on its nodes' host, with no container runtime, and lists no images`,
		},
		"an image a container runtime is not allowed": {
			target: withRuntime(target().AllowedImages("registry.example.org/*"), v1alpha1.ContainerRuntimePyxis),
			c:      caseSpec{tj: imageJob("nvcr.io/nvidia/pytorch:25.01-py3", "python3"), rt: tytesting.TorchRuntimeSpec(1)},
			want:   `image "nvcr.io/nvidia/pytorch:25.01-py3" is not one this target runs (spec.images.allowed: registry.example.org/*)`,
		},
		"no command in the job or the runtime": {
			target: target().Obj(), c: caseSpec{tj: tytesting.MakeTrainJob("train", "team-a").Obj(), rt: noCommand},
			want: "no command",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Render(dispatch(tc.c), tc.target)
			if why := backends.RejectionReason(err); !strings.Contains(why, tc.want) {
				t.Errorf("Render refusal = %q (err %v), want it to contain %q", why, err, tc.want)
			}
		})
	}
}

// TestRenderRunsTheImagesTheTargetRuns: an image the host stands for runs
// on the host without it; an allowed image runs in its container.
func TestRenderRunsTheImagesTheTargetRuns(t *testing.T) {
	cases := map[string]struct {
		target *v1alpha1.Target
		image  string
	}{
		"the host stands for the image": {target: target().Obj(), image: "pytorch/pytorch:2.7.1"},
		"the host stands for every image": {
			target: target().HostImages("*").Obj(), image: "ghcr.io/kubeflow/trainer/x:1"},
		"an allowed image in a container": {
			target: withRuntime(target().AllowedImages("registry.example.org/*"), v1alpha1.ContainerRuntimePyxis),
			image:  "registry.example.org/team/trainer:1"},
		"any image where a container runtime allows all": {
			target: withRuntime(target(), v1alpha1.ContainerRuntimePyxis), image: "nvcr.io/nvidia/pytorch:25.01-py3"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := Render(dispatch(caseSpec{tj: imageJob(tc.image, "python3"), rt: tytesting.TorchRuntimeSpec(1)}), tc.target); err != nil {
				t.Errorf("Render = %v, want the job", err)
			}
		})
	}
}

// withRuntime is w's target with container runtime rt and its host
// environment, which only a bare-node cluster has, removed.
func withRuntime(w *tytesting.TargetWrapper, rt v1alpha1.ContainerRuntime) *v1alpha1.Target {
	tg := w.Obj()
	tg.Spec.Slurm.ContainerRuntime = rt
	if tg.Spec.Images != nil {
		tg.Spec.Images.HostEnvironment = nil
	}
	return tg
}

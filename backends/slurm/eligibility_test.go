package slurm

import (
	"strings"
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	tytest "github.com/trainyard-dev/trainyard/internal/testing"
)

// TestRenderRefusesWhatSlurmCannotRun: what a cluster does not offer and
// what a batch script has no counterpart for are refusals, with the reason.
func TestRenderRefusesWhatSlurmCannotRun(t *testing.T) {
	flux := tytest.TorchRuntimeSpec(1)
	flux.MLPolicy.MLPolicySource = trainer.MLPolicySource{Flux: &trainer.FluxMLPolicySource{}}
	withInit := tytest.TorchRuntimeSpec(1)
	initJob := withInit.Template.Spec.ReplicatedJobs[0]
	initJob.Name = "dataset-initializer"
	initJob.Template.Labels = map[string]string{"trainer.kubeflow.org/trainjob-ancestor-step": "dataset-initializer"}
	withInit.Template.Spec.ReplicatedJobs = append([]jobsetv1alpha2.ReplicatedJob{initJob}, withInit.Template.Spec.ReplicatedJobs...)
	withClaims := tytest.TorchRuntimeSpec(1)
	withClaims.Template.Spec.VolumeClaimPolicies = []jobsetv1alpha2.VolumeClaimPolicy{{}}
	noCommand := tytest.TorchRuntimeSpec(1)
	for i := range noCommand.Template.Spec.ReplicatedJobs {
		for j := range noCommand.Template.Spec.ReplicatedJobs[i].Template.Spec.Template.Spec.Containers {
			c := &noCommand.Template.Spec.ReplicatedJobs[i].Template.Spec.Template.Spec.Containers[j]
			c.Command, c.Args = nil, nil
		}
	}
	cmd := tytest.MakeTrainJob("train", "team-a").Command([]string{"python3"}, "train.py").Obj()

	cases := map[string]struct {
		target *v1alpha1.Target
		c      caseSpec
		want   string
	}{
		"Flux where the cluster lists no launchers": {
			target: tytest.MakeSlurmTarget("hpc", "a100", "gpu").SlurmAccount(v1alpha1.SlurmAccount{Namespace: "team-a", User: "a"}).Obj(),
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
		"no command in the job or the runtime": {
			target: target().Obj(), c: caseSpec{tj: tytest.MakeTrainJob("train", "team-a").Obj(), rt: noCommand},
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

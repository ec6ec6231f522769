package lws

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

func TestEligible(t *testing.T) {
	shipped := tytesting.MustShippedRuntimeSpec
	torch := func(edits ...func(*trainer.TrainingRuntimeSpec)) *trainer.TrainingRuntimeSpec {
		rt := tytesting.TorchRuntimeSpec(1)
		for _, edit := range edits {
			edit(&rt)
		}
		return &rt
	}
	withJob := func(name, ancestor string) func(*trainer.TrainingRuntimeSpec) {
		return func(rt *trainer.TrainingRuntimeSpec) {
			rj := jobsetv1alpha2.ReplicatedJob{Name: name, Replicas: 1, Template: batchv1.JobTemplateSpec{
				Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: name, Image: "init"}}}}}}}
			if ancestor != "" {
				rj.Template.Labels = map[string]string{"trainer.kubeflow.org/trainjob-ancestor-step": ancestor}
			}
			rt.Template.Spec.ReplicatedJobs = append([]jobsetv1alpha2.ReplicatedJob{rj}, rt.Template.Spec.ReplicatedJobs...)
		}
	}
	withoutClaims := func(spec *trainer.TrainingRuntimeSpec) *trainer.TrainingRuntimeSpec {
		spec.Template.Spec.VolumeClaimPolicies = nil
		return spec
	}
	tj := &tytesting.MakeTrainJob("train", "team-a").NumNodes(2).Obj().Spec
	cases := map[string]struct {
		spec    *trainer.TrainingRuntimeSpec
		want    error  // nil when eligible
		wantMsg string // more of the reason
	}{
		"torch":         {spec: torch()},
		"OpenMPI":       {spec: ptr.To(tytesting.MPIRuntimeSpec(1, 2))},
		"Flux, shipped": {spec: shipped(tytesting.TrainerFluxRuntime), want: ErrFlux},
		"volume claim policies, torchtune shipped": {spec: shipped(tytesting.TrainerTorchtuneLlama1B), want: ErrVolumeClaimPolicies,
			wantMsg: "(claims initializer)"},
		"initializers, torchtune without its claims": {spec: withoutClaims(shipped(tytesting.TrainerTorchtuneLlama1B)), want: ErrInitializers,
			wantMsg: "(replicated jobs dataset-initializer, model-initializer)"},
		"initializer, torch with cache shipped": {spec: shipped(tytesting.TrainerTorchWithCache), want: ErrInitializers,
			wantMsg: "(replicated jobs dataset-initializer)"},
		"initializer known by its ancestor label only": {spec: torch(withJob("fetch", "model-initializer")), want: ErrInitializers,
			wantMsg: "(replicated jobs fetch)"},
		"another replicated job": {spec: torch(withJob("sidecar", "")),
			wantMsg: "runs a trainer's nodes (and an MPI launcher) only, not replicated jobs sidecar"},
		"the JobSet backend's refusals come first": {spec: torch(func(rt *trainer.TrainingRuntimeSpec) {
			rt.PodGroupPolicy = &trainer.PodGroupPolicy{}
		}), wantMsg: "podGroupPolicy is not supported"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			before := tc.spec.DeepCopy()
			err := CheckRuntime(tc.spec, tj)
			if tc.want == nil && tc.wantMsg == "" {
				if err != nil {
					t.Fatalf("CheckRuntime = %v, want eligible", err)
				}
				return
			}
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("CheckRuntime = %v, want a refusal wrapping %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("reason %q does not say %q", err, tc.wantMsg)
			}
			if diff := cmp.Diff(before, tc.spec); diff != "" {
				t.Errorf("CheckRuntime changed the runtime spec (-before +after):\n%s", diff)
			}
		})
	}
}

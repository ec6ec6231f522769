package jobset

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

func TestEligible(t *testing.T) {
	shipped := tytesting.MustShippedRuntimeSpec
	torch := func(edit func(*trainer.TrainingRuntimeSpec)) *trainer.TrainingRuntimeSpec {
		rt := tytesting.TorchRuntimeSpec(1)
		edit(&rt)
		return &rt
	}
	job := func(edit func(*trainer.TrainJobSpec)) *trainer.TrainJobSpec {
		tj := tytesting.MakeTrainJob("train", "team-a").NumNodes(2).Obj()
		edit(&tj.Spec)
		return &tj.Spec
	}
	plain := job(func(*trainer.TrainJobSpec) {})
	dataset := &trainer.Initializer{Dataset: &trainer.DatasetInitializer{StorageUri: ptr.To("hf://a/b")}}
	cases := map[string]struct {
		spec *trainer.TrainingRuntimeSpec
		tj   *trainer.TrainJobSpec
		want string // "" when eligible
	}{
		"torch":                        {spec: torch(func(*trainer.TrainingRuntimeSpec) {}), tj: plain},
		"OpenMPI":                      {spec: ptr.To(tytesting.MPIRuntimeSpec(1, 2)), tj: plain},
		"Flux, shipped":                {spec: shipped(tytesting.TrainerFluxRuntime), tj: plain},
		"torchtune with initializers":  {spec: shipped(tytesting.TrainerTorchtuneLlama1B), tj: job(func(s *trainer.TrainJobSpec) { s.Initializer = dataset })},
		"torch with cache initializer": {spec: shipped(tytesting.TrainerTorchWithCache), tj: plain},
		"no replicated jobs":           {spec: &trainer.TrainingRuntimeSpec{}, tj: plain, want: "no replicated jobs"},
		"no TrainJob":                  {spec: torch(func(*trainer.TrainingRuntimeSpec) {}), want: "no TrainJob spec"},
		"runtime of another API group": {spec: torch(func(*trainer.TrainingRuntimeSpec) {}), tj: job(func(s *trainer.TrainJobSpec) { s.RuntimeRef.APIGroup = ptr.To("example.com") }), want: `unsupported runtime group "example.com"`},
		"pod group policy":             {spec: torch(func(rt *trainer.TrainingRuntimeSpec) { rt.PodGroupPolicy = &trainer.PodGroupPolicy{} }), tj: plain, want: "podGroupPolicy is not supported"},
		"MPICH": {spec: torch(func(rt *trainer.TrainingRuntimeSpec) {
			rt.MLPolicy.Torch, rt.MLPolicy.MPI = nil, &trainer.MPIMLPolicySource{MPIImplementation: ptr.To(trainer.MPIImplementationMPICH)}
		}), tj: plain, want: "MPI implementation MPICH is not supported"},
		"Flux, no process per node":       {spec: shipped(tytesting.TrainerFluxRuntime), tj: job(func(s *trainer.TrainJobSpec) { s.Trainer.NumProcPerNode = ptr.To[int32](0) }), want: "at least one process per node, not 0"},
		"Flux, reserved init container":   {spec: fluxWithInit(shipped(tytesting.TrainerFluxRuntime)), tj: plain, want: `init container "flux-installer" of replicated job "node" is reserved for Flux`},
		"dataset asked, runtime has none": {spec: torch(func(*trainer.TrainingRuntimeSpec) {}), tj: job(func(s *trainer.TrainJobSpec) { s.Initializer = dataset }), want: `configures a dataset-initializer but the runtime has no "dataset-initializer" replicated job`},
		"model asked, cache runtime has none": {spec: shipped(tytesting.TrainerTorchWithCache), tj: job(func(s *trainer.TrainJobSpec) {
			s.Initializer = &trainer.Initializer{Model: &trainer.ModelInitializer{StorageUri: ptr.To("hf://m/n")}}
		}), want: `no "model-initializer" replicated job`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var before *trainer.TrainingRuntimeSpec
			if tc.spec != nil {
				before = tc.spec.DeepCopy()
			}
			err := CheckRuntime(tc.spec, tc.tj)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("CheckRuntime = %v, want eligible", err)
			case tc.want != "" && err == nil:
				t.Fatalf("CheckRuntime = nil, want a refusal saying %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Errorf("reason %q does not say %q", err, tc.want)
			}
			if diff := cmp.Diff(before, tc.spec); diff != "" {
				t.Errorf("CheckRuntime changed the runtime spec (-before +after):\n%s", diff)
			}
		})
	}
}

func fluxWithInit(spec *trainer.TrainingRuntimeSpec) *trainer.TrainingRuntimeSpec {
	pod := &spec.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec
	pod.InitContainers = append(pod.InitContainers, corev1.Container{Name: "flux-installer", Image: "mine"})
	return spec
}

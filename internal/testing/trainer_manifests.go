package testing

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// trainerModule is the module whose shipped runtimes and examples tests
// read unchanged, as users apply them.
const trainerModule = "github.com/kubeflow/trainer/v2"

// Paths of runtimes and example TrainJobs inside Trainer's module.
const (
	TrainerFluxRuntime      = "examples/flux/flux-runtime.yaml"
	TrainerFluxLammpsJob    = "examples/flux/lammps-train-job.yaml"
	TrainerTorchtuneLlama1B = "manifests/base/runtimes/torchtune/llama3_2/llama3_2_1B.yaml"
	TrainerTorchWithCache   = "manifests/base/runtimes/data-cache/torch_distributed_with_cache.yaml"
)

var trainerDir = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", trainerModule).Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w", trainerModule, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("module %s is not downloaded: run `go mod download`", trainerModule)
	}
	return dir, nil
})

// TrainerManifest decodes the YAML file rel of Trainer's module (one of
// the Trainer… paths) into obj, strictly: a field trainyard's copy of the
// Trainer API does not know is an error, not silently dropped.
func TrainerManifest(rel string, obj any) error {
	dir, err := trainerDir()
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(filepath.Join(dir, rel))
	if err != nil {
		return err
	}
	if err := yaml.UnmarshalStrict(raw, obj); err != nil {
		return fmt.Errorf("decode %s: %w", rel, err)
	}
	return nil
}

// ShippedRuntime is the ClusterTrainingRuntime Trainer ships at rel.
func ShippedRuntime(rel string) (*trainer.ClusterTrainingRuntime, error) {
	rt := &trainer.ClusterTrainingRuntime{}
	return rt, TrainerManifest(rel, rt)
}

// ShippedTrainJob is the example TrainJob Trainer ships at rel, in ns.
func ShippedTrainJob(rel, ns string) (*trainer.TrainJob, error) {
	tj := &trainer.TrainJob{}
	if err := TrainerManifest(rel, tj); err != nil {
		return nil, err
	}
	tj.Namespace = ns
	return tj, nil
}

// ShippedDispatch is a Dispatch d1 to spoke1 of tj on the
// ClusterTrainingRuntime Trainer ships at runtimePath, snapshotted
// unchanged, admitted for podSets. A nil tj is a bare TrainJob "train" of
// team-a referring to the runtime.
func ShippedDispatch(runtimePath string, tj *trainer.TrainJob, podSets ...v1alpha1.PodSetPlacement) (*v1alpha1.Dispatch, error) {
	rt, err := ShippedRuntime(runtimePath)
	if err != nil {
		return nil, err
	}
	if tj == nil {
		tj = MakeTrainJob("train", "team-a").RuntimeRef(trainer.ClusterTrainingRuntimeKind, rt.Name).Obj()
	}
	if tj.Spec.RuntimeRef.Name != rt.Name {
		return nil, fmt.Errorf("TrainJob %s refers to runtime %q, the shipped one is %q", tj.Name, tj.Spec.RuntimeRef.Name, rt.Name)
	}
	return MakeDispatch("d1", "trainyard-spoke1", "spoke1").
		SnapshotTrainJob(tj).SnapshotRuntime(v1alpha1.RuntimeKindClusterTrainingRuntime, rt.Name, rt.Spec).
		PodSets(podSets...).Obj(), nil
}

// MustShippedRuntimeSpec is the spec of ShippedRuntime(rel); it panics
// when the file cannot be read.
func MustShippedRuntimeSpec(rel string) *trainer.TrainingRuntimeSpec {
	rt, err := ShippedRuntime(rel)
	if err != nil {
		panic(err)
	}
	return &rt.Spec
}

// ShippedRuntimesDir is the folder of every ClusterTrainingRuntime
// Kubeflow installs (manifests/base/runtimes of the pinned module).
const ShippedRuntimesDir = "manifests/base/runtimes"

// AllShippedRuntimes decodes every runtime under ShippedRuntimesDir,
// unchanged, keyed by the path of its file inside Trainer's module.
func AllShippedRuntimes() (map[string]*trainer.ClusterTrainingRuntime, error) {
	dir, err := trainerDir()
	if err != nil {
		return nil, err
	}
	out := map[string]*trainer.ClusterTrainingRuntime{}
	err = filepath.WalkDir(filepath.Join(dir, ShippedRuntimesDir), func(path string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(path, ".yaml") || e.Name() == "kustomization.yaml" {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		rt, err := ShippedRuntime(rel)
		if err != nil {
			return err
		}
		out[rel] = rt
		return nil
	})
	return out, err
}

package cli

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// convertNS is where the converted jobs go; no other test uses it.
const convertNS = "convert"

// TestConvertOnHub converts the PyTorchJobs and MPIJobs that Training
// Operator and mpi-operator ship as examples with the CLI against the hub,
// without --runtime: with no runtime on the hub it says so; with Kubeflow
// Trainer's shipped ClusterTrainingRuntimes applied unchanged it picks them,
// and the hub's API server accepts every TrainJob printed (CRD schema and
// CEL rules, in a server-side dry run: no webhook is served here).
func TestConvertOnHub(t *testing.T) {
	ctx := context.Background()
	if err := hub.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: convertNS}}); err != nil {
		t.Fatal(err)
	}
	examples, err := tytesting.V1Examples()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, ex := range examples {
		if ex.Skip == "" {
			files[ex.Name] = writeDoc(t, ex.JSON)
		}
	}
	if len(files) == 0 {
		t.Fatal("no examples to convert")
	}

	t.Run("no runtime on the hub", func(t *testing.T) {
		path := files[firstKey(files, "/examples/pytorch/")]
		r := runCLI(t, false, "convert", "-f", path, "-n", convertNS)
		want := "no runtime with mlPolicy.torch for PyTorchJobs in namespace convert; runtimes found: none; " +
			"apply one (Kubeflow Trainer ships torch-distributed) or pass --runtime NAME\n"
		if r.code != 1 || r.out != "" || !strings.HasSuffix(r.errOut, want) {
			t.Fatalf("exit code %d, stdout %q, stderr %q; want 1, nothing, an error ending in %q", r.code, r.out, r.errOut, want)
		}
	})

	applyKubeflowRuntimes(t, ctx)
	for name, path := range files {
		t.Run(name, func(t *testing.T) {
			r := runCLI(t, false, "convert", "-f", path, "-n", convertNS, "--queue", "lq")
			if r.code != 0 {
				t.Fatalf("exit code %d, stderr:\n%s", r.code, r.errOut)
			}
			tj := &trainer.TrainJob{}
			if err := yaml.UnmarshalStrict([]byte(r.out), tj); err != nil {
				t.Fatalf("output is not a TrainJob: %v\n%s", err, r.out)
			}
			want := "torch-distributed"
			if strings.Contains(name, "/examples/mpi/") || strings.Contains(name, "/examples/v2beta1/") {
				want = "deepspeed-distributed"
			}
			if tj.Namespace != convertNS || tj.Spec.RuntimeRef.Name != want || !strings.Contains(r.errOut, "note: ") {
				t.Errorf("namespace %q, runtime %q, stderr:\n%s\nwant namespace %s, runtime %s and a note naming it",
					tj.Namespace, tj.Spec.RuntimeRef.Name, r.errOut, convertNS, want)
			}
			if err := hub.Client.Create(ctx, tj, client.DryRunAll); err != nil {
				t.Errorf("the hub refuses the TrainJob: %v\n%s", err, r.out)
			}
		})
	}
}

// writeDoc writes one example document (JSON is YAML) to a file to convert.
func writeDoc(t *testing.T, doc []byte) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "job-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(doc); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

func firstKey(m map[string]string, part string) string {
	for k := range m {
		if strings.Contains(k, part) {
			return k
		}
	}
	return ""
}

// applyKubeflowRuntimes creates every runtime in Trainer's
// manifests/base/runtimes as shipped, and deletes them after the test.
func applyKubeflowRuntimes(t *testing.T, ctx context.Context) {
	t.Helper()
	dir, err := kube.ModuleDir("github.com/kubeflow/trainer/v2")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "manifests", "base", "runtimes")
	err = filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || filepath.Ext(path) != ".yaml" || e.Name() == "kustomization.yaml" {
			return err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(raw, &obj.Object); err != nil {
			return err
		}
		if err := hub.Client.Create(ctx, obj); err != nil {
			return err
		}
		t.Cleanup(func() {
			if err := hub.Client.Delete(context.Background(), obj); err != nil {
				t.Errorf("delete %s: %v", obj.GetName(), err)
			}
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

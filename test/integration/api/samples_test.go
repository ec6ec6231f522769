package api

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/test/harness/kube"
)

// TestSamplesApply creates every object of config/samples on a real API
// server with strict field validation: a sample that names a field the
// CRDs do not have, or breaks a CEL rule, fails here.
func TestSamplesApply(t *testing.T) {
	root, err := kube.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "config", "samples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples found: %v", err)
	}
	kinds := map[string]int{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
		for {
			var obj unstructured.Unstructured
			if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(obj.Object) == 0 {
				continue
			}
			err := k8sClient.Create(context.Background(), &obj, client.FieldValidation("Strict"))
			if apierrors.IsAlreadyExists(err) && obj.GetKind() == "Namespace" {
				err = nil // other tests of the suite made it
			}
			if err != nil {
				t.Errorf("%s: %s %s: %v", filepath.Base(f), obj.GetKind(), obj.GetName(), err)
			}
			kinds[obj.GetKind()]++
		}
	}
	for kind, want := range map[string]int{"Target": 3, "ClusterQueue": 2, "LocalQueue": 2, "ResourceFlavor": 3, "AdmissionCheck": 1, "WorkloadPriorityClass": 2} {
		if kinds[kind] != want {
			t.Errorf("samples hold %d %s objects, want %d", kinds[kind], kind, want)
		}
	}
}

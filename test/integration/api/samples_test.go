package api

import (
	"context"
	"path/filepath"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/test/util"
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
		objs, err := util.ReadManifests(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range objs {
			err := k8sClient.Create(context.Background(), obj, client.FieldValidation("Strict"))
			if apierrors.IsAlreadyExists(err) && obj.GetKind() == "Namespace" {
				err = nil // other tests of the suite made it
			}
			if err != nil {
				t.Errorf("%s: %s %s: %v", filepath.Base(f), obj.GetKind(), obj.GetName(), err)
			}
			kinds[obj.GetKind()]++
		}
	}
	for kind, want := range map[string]int{"Target": 3, "ClusterQueue": 2, "LocalQueue": 2, "ResourceFlavor": 3, "Cohort": 1, "AdmissionCheck": 1, "WorkloadPriorityClass": 2} {
		if kinds[kind] != want {
			t.Errorf("samples hold %d %s objects, want %d", kinds[kind], kind, want)
		}
	}
}

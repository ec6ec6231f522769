package api

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
)

// TestGeneratedFilesAreCurrent regenerates deepcopy code and CRDs into a
// temporary folder and fails when the checked-in copies differ: run
// `make generate` after changing api/.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	root, err := kube.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := kube.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	gen := filepath.Join(bin, "controller-gen")
	out := t.TempDir()
	for _, args := range [][]string{
		{"object:headerFile=hack/boilerplate.go.txt", "paths=./api/...", "output:object:dir=" + filepath.Join(out, "object")},
		{"crd", "paths=./api/...", "output:crd:dir=" + filepath.Join(out, "crd")},
		{"rbac:roleName=trainyard-hub", "paths=./hub/...", "output:rbac:dir=" + filepath.Join(out, "rbac")},
	} {
		cmd := exec.Command(gen, args...)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("controller-gen %v: %v\n%s", args, err, b)
		}
	}
	compare := func(generated, checkedIn string) {
		want, err := os.ReadFile(generated)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(checkedIn)
		if err != nil {
			t.Fatalf("%v (run `make generate`)", err)
		}
		if !bytes.Equal(want, got) {
			t.Errorf("%s is stale: run `make generate`", checkedIn)
		}
	}
	compare(filepath.Join(out, "object", "zz_generated.deepcopy.go"), filepath.Join(root, "api/v1alpha1/zz_generated.deepcopy.go"))
	crds, err := filepath.Glob(filepath.Join(out, "crd", "*.yaml"))
	if err != nil || len(crds) == 0 {
		t.Fatalf("controller-gen wrote no CRDs (%v)", err)
	}
	checkedIn, _ := filepath.Glob(filepath.Join(root, "config/crd/bases", "*.yaml"))
	if len(checkedIn) != len(crds) {
		t.Errorf("config/crd/bases has %d CRDs, controller-gen makes %d: run `make generate`", len(checkedIn), len(crds))
	}
	for _, f := range crds {
		compare(f, filepath.Join(root, "config/crd/bases", filepath.Base(f)))
	}
	compare(filepath.Join(out, "rbac", "role.yaml"), filepath.Join(root, "config/rbac/hub/role.yaml"))
}

// Package fleet starts real Kubernetes control planes for trainyard's tests and
// local sandbox: kube-apiserver and etcd through controller-runtime's envtest,
// plus, as separate processes, kube-controller-manager, kube-scheduler, kwok,
// the JobSet manager and the Kueue manager, all built from Go modules by
// hack/build-tools.sh.
package fleet

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// RepoRoot returns the trainyard checkout this code runs from, found by
// walking up from the working directory to the go.mod of the main module.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/trainyard-dev/trainyard\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no trainyard go.mod above the working directory")
		}
		dir = parent
	}
}

// BinDir is where the control-plane binaries are: $KUBEBUILDER_ASSETS, or
// bin/k8s in the repository.
func BinDir() (string, error) {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin", "k8s"), nil
}

// binary returns the path of one harness binary, with a hint at the build
// step when it is missing.
func binary(name string) (string, error) {
	dir, err := BinDir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s not found in %s: run `make tools` (hack/build-tools.sh) first", name, dir)
	}
	return p, nil
}

var (
	modDirsMu sync.Mutex
	modDirs   = map[string]string{}
)

// ModuleDir returns the module cache folder of a dependency of the main
// module, where its shipped CRD and webhook manifests live.
func ModuleDir(module string) (string, error) {
	modDirsMu.Lock()
	defer modDirsMu.Unlock()
	if d, ok := modDirs[module]; ok {
		return d, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w", module, err)
	}
	d := strings.TrimSpace(string(out))
	if d == "" {
		return "", fmt.Errorf("module %s is not downloaded: run `go mod download`", module)
	}
	modDirs[module] = d
	return d, nil
}

// Manifest sets name where the CRDs of each component ship.
const (
	CRDsKueue     = "kueue"
	CRDsJobSet    = "jobset"
	CRDsLWS       = "lws"
	CRDsTrainer   = "trainer"
	CRDsTrainyard = "trainyard"
)

// CRDPaths resolves manifest set names to folders of CRD YAML.
func CRDPaths(sets ...string) ([]string, error) {
	var paths []string
	for _, s := range sets {
		var mod, rel string
		switch s {
		case CRDsKueue:
			mod, rel = "sigs.k8s.io/kueue", "config/components/crd/bases"
		case CRDsJobSet:
			mod, rel = "sigs.k8s.io/jobset", "config/components/crd/bases"
		case CRDsLWS:
			mod, rel = "sigs.k8s.io/lws", "config/crd/bases"
		case CRDsTrainer:
			mod, rel = "github.com/kubeflow/trainer/v2", "manifests/base/crds"
		case CRDsTrainyard:
			root, err := RepoRoot()
			if err != nil {
				return nil, err
			}
			paths = append(paths, filepath.Join(root, "config", "crd", "bases"))
			continue
		default:
			return nil, fmt.Errorf("unknown CRD set %q", s)
		}
		dir, err := ModuleDir(mod)
		if err != nil {
			return nil, err
		}
		paths = append(paths, filepath.Join(dir, rel))
	}
	return paths, nil
}

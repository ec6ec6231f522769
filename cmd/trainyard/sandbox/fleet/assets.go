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

// RepoRoot returns the trainyard checkout the sandbox works from: the
// sandbox builds and reads bin/k8s, bin/slurm-root, config/ and hack/ there,
// and resolves its dependencies' manifests through the checkout's go.mod.
// It is $TRAINYARD_REPO when set, else the checkout above the working
// directory, else the checkout holding the running binary (so a plugin
// built into <checkout>/bin and linked onto PATH works from anywhere).
func RepoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		exe = ""
	}
	return repoRoot(os.Getenv("TRAINYARD_REPO"), wd, exe)
}

func repoRoot(repoEnv, wd, exe string) (string, error) {
	if repoEnv != "" {
		if root, ok := checkoutAbove(repoEnv); ok && root == filepath.Clean(repoEnv) {
			return root, nil
		}
		return "", fmt.Errorf("TRAINYARD_REPO=%s is not a trainyard checkout (no go.mod of module %s there)", repoEnv, modulePath)
	}
	if root, ok := checkoutAbove(wd); ok {
		return root, nil
	}
	if exe != "" {
		if root, ok := checkoutAbove(filepath.Dir(exe)); ok {
			return root, nil
		}
	}
	return "", fmt.Errorf("no trainyard checkout above %s or the running binary: run from a clone of the repository or set TRAINYARD_REPO to one (the sandbox builds its control planes and Slurm there)", wd)
}

const modulePath = "github.com/trainyard-dev/trainyard"

// checkoutAbove walks up from dir to the go.mod of trainyard's module.
func checkoutAbove(dir string) (string, bool) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", false
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module "+modulePath+"\n") {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
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

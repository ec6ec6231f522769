package testing

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// V1Example is one document of the examples Training Operator V1 and
// mpi-operator ship for the jobs `trainyard convert` reads, or a file of
// those folders that holds none.
type V1Example struct {
	// Name is module@version/path#document (from 1), for test names.
	Name string
	// Path is the file on disk.
	Path string
	// JSON is the document; nil for a skipped file.
	JSON []byte
	// Skip says why the file or document is not a job to convert; "" for
	// a PyTorchJob or MPIJob.
	Skip string
}

// v1ExampleDirs are the example folders, by module; the versions are those
// of the main module's graph (Kueue depends on both modules).
var v1ExampleDirs = []struct{ module, dir string }{
	{"github.com/kubeflow/training-operator", "examples/pytorch"},
	{"github.com/kubeflow/training-operator", "examples/mpi"},
	{"github.com/kubeflow/mpi-operator", "examples/v2beta1"},
}

// convertible are the apiVersion/kind pairs of the jobs convert reads.
var convertible = map[string]bool{
	"kubeflow.org/v1/PyTorchJob": true, "kubeflow.org/v1/MPIJob": true, "kubeflow.org/v2beta1/MPIJob": true,
}

// V1Examples walks the example folders and returns every YAML document in
// them, and every other file with the reason it is skipped.
func V1Examples() ([]V1Example, error) {
	var out []V1Example
	for _, d := range v1ExampleDirs {
		modDir, modVersion, err := downloadedModule(d.module)
		if err != nil {
			return nil, err
		}
		root := filepath.Join(modDir, d.dir)
		err = filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(modDir, path)
			name := fmt.Sprintf("%s@%s/%s", d.module, modVersion, rel)
			if ext := filepath.Ext(path); ext != ".yaml" && ext != ".yml" {
				out = append(out, V1Example{Name: name, Path: path, Skip: "not YAML"})
				return nil
			}
			docs, err := exampleDocs(path)
			for i, doc := range docs {
				out = append(out, V1Example{Name: fmt.Sprintf("%s#%d", name, i+1), Path: path, JSON: doc, Skip: skipReason(doc)})
			}
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// exampleDocs decodes the non-empty documents of a YAML file to JSON.
func exampleDocs(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var docs [][]byte
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			return docs, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(obj) == 0 {
			continue
		}
		b, err := json.Marshal(obj)
		if err != nil {
			return nil, err
		}
		docs = append(docs, b)
	}
}

func skipReason(doc []byte) string {
	var tm struct{ APIVersion, Kind string }
	if err := json.Unmarshal(doc, &tm); err != nil {
		return err.Error()
	}
	if convertible[tm.APIVersion+"/"+tm.Kind] {
		return ""
	}
	return fmt.Sprintf("%s %s is not a job convert reads", tm.APIVersion, tm.Kind)
}

// downloadedModule returns the folder and version of a module of the main
// module's graph. The folder comes from `go mod download`, as `go list`
// leaves it out for a module only the graph (not the build) needs; this
// neither edits go.sum nor fetches anything already in the module cache.
func downloadedModule(module string) (string, string, error) {
	v, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", module).Output()
	if err != nil {
		return "", "", fmt.Errorf("go list -m %s: %w", module, err)
	}
	version := strings.TrimSpace(string(v))
	out, err := exec.Command("go", "mod", "download", "-json", module+"@"+version).Output()
	if err != nil {
		return "", "", fmt.Errorf("go mod download %s@%s: %w", module, version, err)
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil {
		return "", "", err
	}
	if m.Dir == "" {
		return "", "", fmt.Errorf("go mod download %s@%s: %s", module, version, m.Error)
	}
	return m.Dir, version, nil
}

// Package charts tests the Helm charts in charts/ and the kustomize bases in
// config/ with the real helm and kustomize binaries (built by
// hack/build-tools.sh into bin/k8s, or $KUBEBUILDER_ASSETS): helm lint, the
// values schema, the rendered objects, their agreement with the generated
// CRDs and role and with hub/snapshot's webhook and policy, and, in
// apply_test.go, the rendered RBAC on a real API server.
package charts

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
)

const (
	hubChart   = "trainyard-hub"
	agentChart = "trainyard-agent"
	// releaseNS is where the tests install both charts.
	releaseNS = "trainyard-system"
	// jobsNS is the default prefix of the tenant namespaces (the Target's spec.kubernetes.namespace).
	jobsNS = "trainyard-jobs"
)

// release is one helm template invocation: a chart, a release name and the
// values arguments (-f FILE, --set K=V) on top of the chart's defaults.
type release struct {
	chart, name string
	values      []string
}

// hubRelease is the hub as config/default assembles it.
func hubRelease(values ...string) release {
	return release{chart: hubChart, name: "trainyard-hub", values: values}
}

// agentRelease is the agent of Target spoke1 (ci/kubernetes-values.yaml) as
// config/agent assembles it, with values on top.
func agentRelease(values ...string) release {
	return release{chart: agentChart, name: "trainyard-agent-spoke1",
		values: append([]string{"-f", chartPath(agentChart, "ci/kubernetes-values.yaml")}, values...)}
}

// slurmRelease is the agent of Slurm target slurm1 (ci/slurm-values.yaml).
func slurmRelease(values ...string) release {
	return release{chart: agentChart, name: "trainyard-agent-slurm1",
		values: append([]string{"-f", chartPath(agentChart, "ci/slurm-values.yaml")}, values...)}
}

func repoRoot() string {
	root, err := kube.RepoRoot()
	if err != nil {
		panic(err)
	}
	return root
}

func chartPath(chart string, rel ...string) string {
	return filepath.Join(append([]string{repoRoot(), "charts", chart}, rel...)...)
}

// tool is the path of a binary hack/build-tools.sh builds.
func tool(t *testing.T, name string) string {
	t.Helper()
	dir, err := kube.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s not found in %s: run `hack/build-tools.sh helm kustomize` (or `make tools`) first", name, dir)
	}
	return p
}

// run runs a tool and returns its standard output, or an error carrying its
// standard error.
func run(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(tool(t, name), args...)
	cmd.Dir = repoRoot()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s%s", name, strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.String(), nil
}

// template renders r, CRDs included.
func (r release) template(t *testing.T) (string, error) {
	t.Helper()
	args := append([]string{"template", r.name, chartPath(r.chart), "--namespace", releaseNS, "--include-crds"}, r.values...)
	return run(t, "helm", args...)
}

// render renders r and parses the objects; a rendering error fails the test.
func (r release) render(t *testing.T) objects {
	t.Helper()
	out, err := r.template(t)
	if err != nil {
		t.Fatal(err)
	}
	return parse(t, out)
}

// kustomize builds a kustomization folder and parses the objects.
func kustomize(t *testing.T, dir string) objects {
	t.Helper()
	out, err := run(t, "kustomize", "build", dir)
	if err != nil {
		t.Fatal(err)
	}
	return parse(t, out)
}

// objects is a parsed multi-document manifest.
type objects []*unstructured.Unstructured

func parse(t *testing.T, manifest string) objects {
	t.Helper()
	var objs objects
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(manifest)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read manifest: %v", err)
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("parse manifest document: %v\n%s", err, doc)
		}
		if len(bytes.TrimSpace(js)) == 0 || string(js) == "null" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := json.Unmarshal(js, &u.Object); err != nil {
			t.Fatalf("decode manifest document: %v\n%s", err, doc)
		}
		if u.GetKind() == "" || u.GetName() == "" {
			t.Fatalf("manifest document without kind or name:\n%s", doc)
		}
		objs = append(objs, u)
	}
	if len(objs) == 0 {
		t.Fatal("the manifest holds no objects")
	}
	return objs
}

// key names an object in messages and maps.
func key(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetKind() + " " + u.GetName()
	}
	return u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
}

// ofKind returns the objects of one kind.
func (objs objects) ofKind(kind string) objects {
	var out objects
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// one returns the only object of kind, failing the test unless there is
// exactly one.
func (objs objects) one(t *testing.T, kind string) *unstructured.Unstructured {
	t.Helper()
	of := objs.ofKind(kind)
	if len(of) != 1 {
		t.Fatalf("want 1 %s, rendered %d (objects: %v)", kind, len(of), objs.keys())
	}
	return of[0]
}

// named returns the object of kind and name, failing the test if absent.
func (objs objects) named(t *testing.T, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs.ofKind(kind) {
		if o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s among %v", kind, name, objs.keys())
	return nil
}

func (objs objects) keys() []string {
	var ks []string
	for _, o := range objs {
		ks = append(ks, key(o))
	}
	sort.Strings(ks)
	return ks
}

// kinds returns the sorted distinct kinds.
func (objs objects) kinds() []string {
	seen := map[string]bool{}
	var ks []string
	for _, o := range objs {
		if !seen[o.GetKind()] {
			seen[o.GetKind()] = true
			ks = append(ks, o.GetKind())
		}
	}
	sort.Strings(ks)
	return ks
}

// as converts u into a typed object. Unknown fields fail the test, so a
// misspelt field in a template is caught here rather than dropped by the API
// server.
func as[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	var v T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &v, true); err != nil {
		t.Fatalf("%s: %v", key(u), err)
	}
	return &v
}

// readYAML decodes one YAML file of the repository into v.
func readYAML(t *testing.T, rel string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(), rel))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, v); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
}

package charts

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// helmOnlyLabels are the labels only Helm's rendering carries.
var helmOnlyLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/version"}

// TestKustomizeMatchesHelm: each kustomize base in config/ builds the same
// objects, field for field, as its chart with the matching values; only the
// Namespaces, which Helm leaves to --create-namespace, are extra.
func TestKustomizeMatchesHelm(t *testing.T) {
	root := repoRoot()
	for _, tc := range []struct {
		name       string
		dir        string
		components []string
		r          release
	}{
		{"hub", "config/default", nil, hubRelease()},
		{"hub with prometheus", "config/default", []string{"config/prometheus"}, hubRelease("--set", "metrics.serviceMonitor.enabled=true")},
		{"agent spoke1", "config/agent", nil, agentRelease()},
		{"agent spoke1 with prometheus", "config/agent", []string{"config/agent/prometheus"}, agentRelease("--set", "metrics.serviceMonitor.enabled=true")},
		{"agent spoke1 with LeaderWorkerSets", "config/agent", []string{"config/agent/leaderworkerset"}, agentRelease("--set", "kubernetes.leaderWorkerSet=true")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(root, tc.dir)
			if len(tc.components) > 0 {
				dir = withComponents(t, dir, tc.components)
			}
			built := byKey(kustomize(t, dir))
			rendered := byKey(tc.r.render(t))
			for k, want := range rendered {
				got, ok := built[k]
				if !ok {
					t.Errorf("%s: the chart renders %s, kustomize does not", tc.dir, k)
					continue
				}
				stripLabels(want)
				if diff := cmp.Diff(want.Object, got.Object); diff != "" {
					t.Errorf("%s differs (-chart +kustomize):\n%s", k, diff)
				}
			}
			kinds := map[string]bool{}
			for k, o := range built {
				kinds[o.GetKind()] = true
				if _, ok := rendered[k]; !ok && o.GetKind() != "Namespace" {
					t.Errorf("%s: kustomize builds %s, the chart does not", tc.dir, k)
				}
			}
			for _, k := range tc.r.render(t).kinds() {
				if !kinds[k] {
					t.Errorf("kustomize output has no %s", k)
				}
			}
		})
	}
}

// withComponents writes a kustomization that adds components to base
// (kustomize takes only relative paths).
func withComponents(t *testing.T, base string, components []string) string {
	t.Helper()
	dir := t.TempDir()
	rel := func(p string) string {
		r, err := filepath.Rel(dir, p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- " + rel(base) + "\ncomponents:\n"
	for _, c := range components {
		k += "- " + rel(filepath.Join(repoRoot(), c)) + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func byKey(objs objects) map[string]*unstructured.Unstructured {
	m := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		m[key(o)] = o
	}
	return m
}

func stripLabels(u *unstructured.Unstructured) {
	l := u.GetLabels()
	for _, k := range helmOnlyLabels {
		delete(l, k)
	}
	if len(l) == 0 {
		unstructured.RemoveNestedField(u.Object, "metadata", "labels")
		return
	}
	u.SetLabels(l)
}

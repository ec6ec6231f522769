package fleet

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

// kwokLogsCRD is kwok v0.8.0's Logs CRD (kustomize/crd/bases), which kwok
// started with --enable-crds=Logs watches for the files it serves.
//
//go:embed kwok-logs-crd.yaml
var kwokLogsCRD []byte

var kwokLogsGVK = schema.GroupVersionKind{Group: "kwok.x-k8s.io", Version: "v1alpha1", Kind: "Logs"}

// withKwokLogs installs the Logs CRD and makes the API server reach a
// node's kubelet at its InternalIP (kwok's server on 127.0.0.1): the
// default prefers the Hostname address, the node name, which resolves
// nowhere.
func withKwokLogs(env *envtest.Environment) error {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(kwokLogsCRD, crd); err != nil {
		return fmt.Errorf("kwok logs CRD: %w", err)
	}
	env.CRDs = append(env.CRDs, crd)
	env.ControlPlane.GetAPIServer().Configure().Set("kubelet-preferred-address-types", "InternalIP")
	return nil
}

// SetPodLogs makes the kwok pods in namespace ns that sel selects (their
// labels, or {"metadata.name": name} for one pod) report lines as the
// output of container: the API server's pods/log then returns them. It
// replaces what was set before and returns the names of the pods it set.
// kwok picks a change up from its watch, so a reader may need a moment.
func (c *Cluster) SetPodLogs(ctx context.Context, ns string, sel map[string]string, container string, lines ...string) ([]string, error) {
	var names []string
	if name, ok := sel["metadata.name"]; ok && len(sel) == 1 {
		names = []string{name}
	} else {
		var pods corev1.PodList
		if err := c.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(sel)); err != nil {
			return nil, err
		}
		for _, p := range pods.Items {
			names = append(names, p.Name)
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("no pods in %s match %v", ns, sel)
		}
		sort.Strings(names)
	}
	dir := filepath.Join(c.Dir, "pod-logs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for _, name := range names {
		path := filepath.Join(dir, fmt.Sprintf("%s_%s_%s.log", ns, name, container))
		if err := os.WriteFile(path, criLog(lines), 0o644); err != nil {
			return nil, err
		}
		if err := c.setKwokLogs(ctx, ns, name, container, path); err != nil {
			return nil, err
		}
	}
	return names, nil
}

// criLog writes lines in the CRI log format kwok reads, as the kubelet's
// container runtime would have.
func criLog(lines []string) []byte {
	var b strings.Builder
	ts := time.Now().UTC()
	for i, l := range lines {
		fmt.Fprintf(&b, "%s stdout F %s\n", ts.Add(time.Duration(i)*time.Microsecond).Format(time.RFC3339Nano), l)
	}
	return []byte(b.String())
}

// setKwokLogs points the Logs object of pod ns/name (kwok finds it by the
// pod's name) at path for container, keeping its other containers.
func (c *Cluster) setKwokLogs(ctx context.Context, ns, name, container, path string) error {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(kwokLogsGVK)
	err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	exists := err == nil
	var logs []any
	if exists {
		old, _, _ := unstructured.NestedSlice(obj.Object, "spec", "logs")
		for _, l := range old {
			m, _ := l.(map[string]any)
			cs, _, _ := unstructured.NestedStringSlice(m, "containers")
			if len(cs) == 1 && cs[0] == container {
				continue
			}
			logs = append(logs, l)
		}
	} else {
		obj.SetNamespace(ns)
		obj.SetName(name)
	}
	logs = append(logs, map[string]any{"containers": []any{container}, "logsFile": path})
	if err := unstructured.SetNestedSlice(obj.Object, logs, "spec", "logs"); err != nil {
		return err
	}
	if exists {
		return c.Client.Update(ctx, obj)
	}
	return c.Client.Create(ctx, obj)
}

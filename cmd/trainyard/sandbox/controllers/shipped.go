package controllers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
)

// ShippedHubObjects are the files of config/ (which the hub chart renders
// alike; test/integration/charts checks it) whose objects the sandbox hub
// gets as an administrator installs them: the admission policies the hub
// relies on but may not create, and the tenant ClusterRoles.
var ShippedHubObjects = []string{
	"config/hub/pinned_runtime_policy.yaml",
	"config/hub/logrequest_requester_policy.yaml",
	"config/hub/dispatch_writer_policy.yaml",
	"config/rbac/tenant/role.yaml",
}

// installShipped creates the objects of ShippedHubObjects on h, keeping
// those that exist.
func installShipped(ctx context.Context, h *fleet.Cluster) error {
	objs, err := ReadShipped(ShippedHubObjects...)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := h.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("install %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return nil
}

// ReadShipped reads the objects of manifests in the repository (paths
// relative to its root), in order.
func ReadShipped(paths ...string) ([]*unstructured.Unstructured, error) {
	root, err := fleet.RepoRoot()
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, p := range paths {
		raw, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			return nil, err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			if len(u.Object) > 0 {
				out = append(out, u)
			}
		}
	}
	return out, nil
}

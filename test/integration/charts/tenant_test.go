package charts

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// Tenant roles the hub chart ships (config/rbac/tenant alike).
const (
	tenantRole     = "trainyard-tenant"
	tenantViewRole = "trainyard-tenant-view"
)

// TestTenantRoles: the chart's tenant ClusterRoles aggregate into the
// built-in edit and view roles, give what `trainyard jobs`, `describe` and
// `logs` read and write in a namespace, and name no Dispatch; view writes
// nothing and reads no LogRequest (their answers hold log output, which
// only trainjobs/log gives), and the edit role lists none.
// tenantRoles.enabled=false leaves them out.
func TestTenantRoles(t *testing.T) {
	objs := hubRelease().render(t)
	edit := as[rbacv1.ClusterRole](t, objs.named(t, "ClusterRole", tenantRole))
	view := as[rbacv1.ClusterRole](t, objs.named(t, "ClusterRole", tenantViewRole))
	if edit.Labels["rbac.authorization.k8s.io/aggregate-to-edit"] != "true" {
		t.Errorf("%s labels %v, want aggregate-to-edit", tenantRole, edit.Labels)
	}
	if view.Labels["rbac.authorization.k8s.io/aggregate-to-view"] != "true" {
		t.Errorf("%s labels %v, want aggregate-to-view", tenantViewRole, view.Labels)
	}
	for _, need := range []struct {
		group, resource string
		verbs           []string
	}{
		{"trainer.kubeflow.org", "trainjobs", []string{"get", "list", "watch", "create", "delete"}},
		{"trainer.kubeflow.org", "trainjobs/log", []string{"get"}},
		{"kueue.x-k8s.io", "workloads", []string{"get", "list", "watch"}},
		{"", "events", []string{"list"}},
		{"trainyard.dev", "logrequests", []string{"create", "get", "delete"}},
	} {
		if !grants(edit.Rules, need.group, need.resource, need.verbs...) {
			t.Errorf("%s does not grant %v on %s.%s", tenantRole, need.verbs, need.resource, need.group)
		}
	}
	for _, need := range [][2]string{{"trainer.kubeflow.org", "trainjobs"}, {"kueue.x-k8s.io", "workloads"}} {
		if !grants(view.Rules, need[0], need[1], "get", "list", "watch") {
			t.Errorf("%s does not let a viewer read %s.%s", tenantViewRole, need[1], need[0])
		}
	}
	for _, v := range []string{"get", "list", "watch"} {
		if grants(view.Rules, "trainyard.dev", "logrequests", v) {
			t.Errorf("%s grants %s on LogRequests, whose answers hold log output", tenantViewRole, v)
		}
	}
	for _, v := range []string{"list", "watch"} {
		if grants(edit.Rules, "trainyard.dev", "logrequests", v) {
			t.Errorf("%s grants %s on LogRequests: a tenant reads back only the ones it made, by name", tenantRole, v)
		}
	}
	for _, role := range []*rbacv1.ClusterRole{edit, view} {
		for _, r := range role.Rules {
			for _, res := range r.Resources {
				if res == "dispatches" || res == "dispatches/status" || res == "targets" || res == "*" {
					t.Errorf("%s grants %v on %s", role.Name, r.Verbs, res)
				}
			}
			if role == view && slices.ContainsFunc(r.Verbs, func(v string) bool { return !slices.Contains([]string{"get", "list", "watch"}, v) }) {
				t.Errorf("%s grants %v on %v: a view role only reads", role.Name, r.Verbs, r.Resources)
			}
		}
	}
	off := hubRelease("--set", "tenantRoles.enabled=false").render(t)
	for _, o := range off.ofKind("ClusterRole") {
		if o.GetName() == tenantRole || o.GetName() == tenantViewRole {
			t.Errorf("tenantRoles.enabled=false still renders %s", o.GetName())
		}
	}
}

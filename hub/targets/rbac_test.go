package targets

import (
	"bytes"
	"flag"
	"os"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

// The shipped example of an agent's hub RBAC is AgentRBAC's output for a
// target named spoke1 whose agent runs as the hub ServiceAccount
// trainyard-agent in its namespace, beside a hub running as config/hub's
// ServiceAccount. Regenerate with
// `go test ./hub/targets -run TestAgentRBACManifest -update`.
const agentRBACFile = "../../config/rbac/agent/spoke1.yaml"

func TestAgentRBACManifest(t *testing.T) {
	target := tytesting.MakeKubernetesTarget("spoke1", "gpu").Obj()
	subject := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "trainyard-agent", Namespace: target.Spec.Agent.Namespace}
	hub := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "trainyard-hub", Namespace: "trainyard-system"}
	var out bytes.Buffer
	out.WriteString("# Hub RBAC of the agent namespace of Target spoke1 (generated from hub/targets.AgentRBAC; see rbac_test.go).\n")
	for _, obj := range AgentRBAC(target, subject, hub) {
		obj.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{Group: rbacv1.GroupName, Version: "v1", Kind: kindOf(obj)})
		b, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		out.WriteString("---\n")
		out.Write(bytes.ReplaceAll(b, []byte("  creationTimestamp: null\n"), nil))
	}
	if *update {
		if err := os.WriteFile(agentRBACFile, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(agentRBACFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want, out.Bytes()) {
		t.Errorf("%s is stale: run go test ./hub/targets -run TestAgentRBACManifest -update", agentRBACFile)
	}
}

// TestAgentRBACGrantsNothingClusterWide: the only cluster-scoped rules name
// the agent's own Target; everything else is namespaced. list and watch
// with a resource name allow only a field selector on that name (the
// agent's watch of its Target's spec).
func TestAgentRBACGrantsNothingClusterWide(t *testing.T) {
	for _, obj := range AgentRBAC(tytesting.MakeKubernetesTarget("s", "gpu").Obj(), agentUser, hubUser) {
		cr, ok := obj.(*rbacv1.ClusterRole)
		if !ok {
			continue
		}
		for _, r := range cr.Rules {
			if len(r.ResourceNames) != 1 || r.ResourceNames[0] != "s" {
				t.Errorf("cluster-wide rule not limited to the target: %+v", r)
			}
			for _, v := range r.Verbs {
				if v == "create" || v == "delete" || v == "deletecollection" || v == "*" {
					t.Errorf("cluster-wide rule grants %s: %+v", v, r)
				}
			}
		}
	}
}

var (
	agentUser = rbacv1.Subject{Kind: rbacv1.UserKind, Name: "a"}
	hubUser   = rbacv1.Subject{Kind: rbacv1.UserKind, Name: "hub"}
)

// TestAgentRBACWritesOnlyStatus: of its Target the agent writes only
// targets/status; of Dispatches, their status and, by patch, the finalizer
// DispatchWriterPolicy leaves it (RBAC cannot say which field). The hub
// gets nothing but ConfigMap deletes in the agent namespace.
func TestAgentRBACWritesOnlyStatus(t *testing.T) {
	writes := map[string][]string{}
	var hubRules []rbacv1.PolicyRule
	for _, obj := range AgentRBAC(tytesting.MakeKubernetesTarget("s", "gpu").Obj(), agentUser, hubUser) {
		var rules []rbacv1.PolicyRule
		switch o := obj.(type) {
		case *rbacv1.Role:
			if o.Name == HubAnswersRBACName("s") {
				hubRules = o.Rules
				continue
			}
			rules = o.Rules
		case *rbacv1.ClusterRole:
			rules = o.Rules
		case *rbacv1.RoleBinding:
			want := agentUser
			if o.Name == HubAnswersRBACName("s") {
				want = hubUser
			}
			if len(o.Subjects) != 1 || o.Subjects[0] != want || o.RoleRef.Name != o.Name {
				t.Errorf("RoleBinding %s binds %v to %v, want %v to its own Role", o.Name, o.RoleRef.Name, o.Subjects, want)
			}
		}
		for _, r := range rules {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					if v != "get" && v != "list" && v != "watch" {
						writes[res] = append(writes[res], v)
					}
				}
			}
		}
	}
	for _, res := range []string{"targets", "targets/status", "dispatches", "dispatches/status"} {
		want := map[string][]string{"targets/status": {"update"}, "dispatches": {"patch"}, "dispatches/status": {"update"}}[res]
		if !slices.Equal(writes[res], want) {
			t.Errorf("the agent writes %s with %v, want %v", res, writes[res], want)
		}
	}
	want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"delete"}}}
	if diff := cmp.Diff(want, hubRules); diff != "" {
		t.Errorf("the hub's rules in the agent namespace (-want +got):\n%s", diff)
	}
}

func kindOf(v any) string {
	switch v.(type) {
	case *rbacv1.Role:
		return "Role"
	case *rbacv1.RoleBinding:
		return "RoleBinding"
	case *rbacv1.ClusterRole:
		return "ClusterRole"
	case *rbacv1.ClusterRoleBinding:
		return "ClusterRoleBinding"
	}
	return ""
}

// TestAgentRBACSecretOnlyForSlurmCredential: a Slurm agent may read its
// credential Secret by name, and no Secret at all otherwise.
func TestAgentRBACSecretOnlyForSlurmCredential(t *testing.T) {
	secretRules := func(tg *v1alpha1.Target) []rbacv1.PolicyRule {
		var out []rbacv1.PolicyRule
		for _, obj := range AgentRBAC(tg, agentUser, hubUser) {
			role, ok := obj.(*rbacv1.Role)
			if !ok {
				continue
			}
			for _, r := range role.Rules {
				if slices.Contains(r.Resources, "secrets") {
					out = append(out, r)
				}
			}
		}
		return out
	}
	if got := secretRules(tytesting.MakeKubernetesTarget("k", "gpu").Obj()); len(got) != 0 {
		t.Errorf("Kubernetes agent may read secrets: %+v", got)
	}
	file := tytesting.MakeSlurmTarget("s", "hpc", "gpu").SlurmAuth(&v1alpha1.SlurmAuth{Type: v1alpha1.SlurmAuthSigningKey, File: "/k"}).Obj()
	if got := secretRules(file); len(got) != 0 {
		t.Errorf("Slurm agent with a file credential may read secrets: %+v", got)
	}
	ref := tytesting.MakeSlurmTarget("s", "hpc", "gpu").SlurmAuth(&v1alpha1.SlurmAuth{Type: v1alpha1.SlurmAuthSigningKey,
		SecretRef: &v1alpha1.SecretKeyRef{Name: "slurm-jwt", Key: "key"}}).Obj()
	got := secretRules(ref)
	if len(got) != 1 || !slices.Equal(got[0].ResourceNames, []string{"slurm-jwt"}) || !slices.Equal(got[0].Verbs, []string{"get"}) {
		t.Errorf("secret rules = %+v, want get on slurm-jwt only", got)
	}
}

package targets

import (
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// AgentRBAC returns the hub RBAC an agent needs and nothing more: its
// target's Dispatches in its own namespace, its own Target's status, events
// and a leader-election lease there and, for a Slurm target, its credential
// Secret. subject is the identity the agent's hub credentials authenticate as.
func AgentRBAC(t *v1alpha1.Target, subject rbacv1.Subject) []client.Object {
	ns := t.Spec.Agent.Namespace
	name := "trainyard-agent-" + t.Name
	group := v1alpha1.GroupVersion.Group
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Rules: []rbacv1.PolicyRule{
			// patch: the agent's finalizer; nothing else of a Dispatch's spec
			// or metadata is the agent's to change.
			{APIGroups: []string{group}, Resources: []string{"dispatches"}, Verbs: []string{"get", "list", "watch", "patch"}},
			{APIGroups: []string{group}, Resources: []string{"dispatches/status"}, Verbs: []string{"get", "update", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
			{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
			// Answers to `trainyard logs`, read uncached (no list or watch).
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "create", "update"}},
		},
	}
	if sl := t.Spec.Slurm; sl != nil && sl.Auth != nil && sl.Auth.SecretRef != nil {
		// The Slurm credential, and no other Secret.
		role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"},
			ResourceNames: []string{sl.Auth.SecretRef.Name}, Verbs: []string{"get"}})
	}
	clusterRole := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{group}, Resources: []string{"targets", "targets/status"}, ResourceNames: []string{t.Name}, Verbs: []string{"get", "update", "patch"}},
			// A watch of its own Target only (a field selector on its name),
			// so spec changes apply without a restart.
			{APIGroups: []string{group}, Resources: []string{"targets"}, ResourceNames: []string{t.Name}, Verbs: []string{"list", "watch"}},
		},
	}
	return []client.Object{
		role,
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects:   []rbacv1.Subject{subject},
		},
		clusterRole,
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects:   []rbacv1.Subject{subject},
		},
	}
}

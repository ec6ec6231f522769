package targets

import (
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// AgentRBAC returns the hub RBAC of one Target's agent namespace: what the
// agent needs and nothing more, and the hub's one write there.
//
// The agent (subject agent, the identity its hub credentials authenticate
// as) gets, in its agent namespace, its target's Dispatches and their
// status, events, its lease and its log answers and, for a Slurm target,
// its credential Secret; cluster-wide, its own Target by name, whose status
// it writes and whose spec it only reads. Its patch of Dispatches and its
// status writes are bounded further by DispatchWriterPolicy: the
// finalizer RemoteCleanupFinalizer is all of a Dispatch's metadata it may
// change, and only of Dispatches naming its Target.
//
// The hub (subject hub) may delete ConfigMaps there: the agent's answers to
// `trainyard logs`, once copied into the LogRequest (hub/tenantview). It
// deletes no ConfigMap anywhere else.
func AgentRBAC(t *v1alpha1.Target, agent, hub rbacv1.Subject) []client.Object {
	ns := t.Spec.Agent.Namespace
	name := "trainyard-agent-" + t.Name
	group := v1alpha1.GroupVersion.Group
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Rules: []rbacv1.PolicyRule{
			// patch: the agent's finalizer, and nothing else of a Dispatch's
			// metadata (DispatchWriterPolicy).
			{APIGroups: []string{group}, Resources: []string{"dispatches"}, Verbs: []string{"get", "list", "watch", "patch"}},
			{APIGroups: []string{group}, Resources: []string{"dispatches/status"}, Verbs: []string{"update"}},
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
			// Its Target's spec is the administrator's (flavors, namespaces
			// served, allowed pod fields): read only. Status is the agent's
			// heartbeat, capacity and topology.
			{APIGroups: []string{group}, Resources: []string{"targets/status"}, ResourceNames: []string{t.Name}, Verbs: []string{"update"}},
			// get, and a watch of its own Target only (list and watch with a
			// resource name allow only a field selector on that name), so
			// spec changes apply without a restart.
			{APIGroups: []string{group}, Resources: []string{"targets"}, ResourceNames: []string{t.Name}, Verbs: []string{"get", "list", "watch"}},
		},
	}
	hubName := HubAnswersRBACName(t.Name)
	return []client.Object{
		role,
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects:   []rbacv1.Subject{agent},
		},
		clusterRole,
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects:   []rbacv1.Subject{agent},
		},
		&rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: hubName, Namespace: ns},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"delete"}}},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: hubName, Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: hubName},
			Subjects:   []rbacv1.Subject{hub},
		},
	}
}

// HubAnswersRBACName names the Role, and its binding, that lets the hub
// delete the log answers in the agent namespace of target.
func HubAnswersRBACName(target string) string { return "trainyard-hub-answers-" + target }

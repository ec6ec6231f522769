package charts

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/trainyard-dev/trainyard/spoke"
)

// TestAgentKubernetes: a Kubernetes agent reads nodes, pods and JobSets
// across its spoke and makes tenant namespaces (an admission policy bounds
// their names and labels); its writes come from a ClusterRole it may only
// bind, in namespaces labelled as a tenant's (another policy says so), and
// it runs with leader election, probes and
// the hub kubeconfig mounted where its flag points.
func TestAgentKubernetes(t *testing.T) {
	objs := agentRelease().render(t)
	sa := objs.one(t, "ServiceAccount")
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.GetName(), Namespace: releaseNS}}

	cr := as[rbacv1.ClusterRole](t, objs.named(t, "ClusterRole", "trainyard-agent-spoke1-spoke"))
	tenant := as[rbacv1.ClusterRole](t, objs.named(t, "ClusterRole", "trainyard-agent-spoke1-tenant"))
	for _, r := range []struct{ group, resource string }{{"", "nodes"}, {"", "pods"}, {"jobset.x-k8s.io", "jobsets"}} {
		if !grants(cr.Rules, r.group, r.resource, "get", "list", "watch") {
			t.Errorf("ClusterRole does not let the agent read %s: %+v", r.resource, cr.Rules)
		}
	}
	// Cluster-wide writes: making namespaces, binding the tenant role and
	// reviewing the status API's tokens, nothing else.
	writes := map[string][]string{"namespaces": {"create"}, "rolebindings": {"create"}, "clusterroles": {"bind"}, "tokenreviews": {"create"}}
	for _, rule := range cr.Rules {
		for _, v := range rule.Verbs {
			if slices.Contains([]string{"get", "list", "watch"}, v) {
				continue
			}
			if len(rule.Resources) != 1 || !slices.Contains(writes[rule.Resources[0]], v) {
				t.Errorf("ClusterRole grants %s on %v cluster-wide; writes belong in the tenant role", v, rule.Resources)
			}
			if rule.Resources[0] == "clusterroles" && !cmp.Equal(rule.ResourceNames, []string{tenant.Name}) {
				t.Errorf("the agent may bind %v, want only %s", rule.ResourceNames, tenant.Name)
			}
		}
		if slices.Contains(rule.Resources, "secrets") || slices.Contains(rule.Resources, "*") {
			t.Errorf("ClusterRole grants %v", rule.Resources)
		}
	}
	crb := as[rbacv1.ClusterRoleBinding](t, objs.one(t, "ClusterRoleBinding"))
	if crb.RoleRef.Name != cr.Name || !cmp.Equal(subject, crb.Subjects) {
		t.Errorf("ClusterRoleBinding %+v -> %+v, want %s -> %+v", crb.RoleRef, crb.Subjects, cr.Name, subject)
	}
	if !grants(tenant.Rules, "jobset.x-k8s.io", "jobsets", "get", "list", "watch", "create", "delete") ||
		!grants(tenant.Rules, "networking.k8s.io", "networkpolicies", "create") || !grants(tenant.Rules, "", "secrets", "get", "create") {
		t.Errorf("tenant ClusterRole = %+v, want JobSets, companions and NetworkPolicies", tenant.Rules)
	}
	if grants(tenant.Rules, "leaderworkerset.x-k8s.io", "leaderworkersets", "create") {
		t.Error("LeaderWorkerSets granted without kubernetes.leaderWorkerSet")
	}
	checkElectionRBAC(t, objs, subject)
	// Its RoleBindings only in tenant namespaces, and those only as it
	// makes them (checked on an API server by TestChartsOnAPIServer).
	for _, name := range []string{"trainyard-agent-spoke1-tenant-bindings", "trainyard-agent-spoke1-tenant-namespaces"} {
		objs.named(t, "ValidatingAdmissionPolicy", name)
		if b := objs.named(t, "ValidatingAdmissionPolicyBinding", name); b.Object["spec"].(map[string]any)["policyName"] != name {
			t.Errorf("ValidatingAdmissionPolicyBinding %v does not bind %s", b.Object["spec"], name)
		}
	}
	if n := len(objs.ofKind("ValidatingAdmissionPolicy")); n != 2 {
		t.Errorf("the agent chart renders %d ValidatingAdmissionPolicies, want 2", n)
	}
	// Names stay clear of the hub RBAC hub/targets.AgentRBAC makes
	// (trainyard-agent-<target>), should the spoke be the hub cluster.
	for _, o := range append(objs.ofKind("ClusterRole"), objs.ofKind("ClusterRoleBinding")...) {
		if o.GetName() == "trainyard-agent-spoke1" {
			t.Errorf("%s has the name of the target's hub RBAC", key(o))
		}
	}

	d := as[appsv1.Deployment](t, objs.one(t, "Deployment"))
	c := container(t, d, "agent")
	for _, a := range []string{"--target=spoke1", "--backend=kubernetes", "--leader-elect=true",
		"--health-probe-bind-address=:8081", "--metrics-bind-address=:8080", "--spoke-tenant-role=" + tenant.Name} {
		if !slices.Contains(c.Args, a) {
			t.Errorf("agent args %q lack %q", c.Args, a)
		}
	}
	checkProbes(t, c, 8081)
	checkHardened(t, d, c)
	if d.Spec.Template.Spec.ServiceAccountName != sa.GetName() {
		t.Errorf("pod runs as %q, not the chart's ServiceAccount", d.Spec.Template.Spec.ServiceAccountName)
	}
	if got := secretFileOf(t, d, c, flagValue(c, "--hub-kubeconfig")); got != "trainyard-hub-kubeconfig/kubeconfig" {
		t.Errorf("--hub-kubeconfig reads %q, want Secret trainyard-hub-kubeconfig key kubeconfig", got)
	}

	lws := agentRelease("--set", "kubernetes.leaderWorkerSet=true").render(t)
	role := as[rbacv1.ClusterRole](t, lws.named(t, "ClusterRole", tenant.Name))
	if !grants(role.Rules, "leaderworkerset.x-k8s.io", "leaderworkersets", "create", "delete", "patch") {
		t.Errorf("with leaderWorkerSet, tenant ClusterRole = %+v, want LeaderWorkerSet writes", role.Rules)
	}
	if cr := as[rbacv1.ClusterRole](t, lws.named(t, "ClusterRole", cr.Name)); !grants(cr.Rules, "leaderworkerset.x-k8s.io", "leaderworkersets", "list", "watch") {
		t.Errorf("with leaderWorkerSet, ClusterRole = %+v, want LeaderWorkerSet reads", cr.Rules)
	}
}

// TestAgentSlurm: a Slurm agent gets no spoke RBAC and finds its slurmrestd
// credential as files from a Secret mounted without subPath (so rotation
// reaches it), readable by its non-root user.
func TestAgentSlurm(t *testing.T) {
	objs := slurmRelease().render(t)
	for _, kind := range []string{"ClusterRole", "ClusterRoleBinding"} {
		if n := len(objs.ofKind(kind)); n != 0 {
			t.Errorf("a Slurm agent needs no spoke RBAC, rendered %d %s", n, kind)
		}
	}
	checkElectionRBAC(t, objs, []rbacv1.Subject{{Kind: "ServiceAccount", Name: "trainyard-agent-slurm1", Namespace: "trainyard-system"}})
	d := as[appsv1.Deployment](t, objs.one(t, "Deployment"))
	c := container(t, d, "agent")
	for _, a := range []string{"--target=slurm1", "--backend=slurm", "--leader-elect=true"} {
		if !slices.Contains(c.Args, a) {
			t.Errorf("agent args %q lack %q", c.Args, a)
		}
	}
	checkProbes(t, c, 8081)
	checkHardened(t, d, c)
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	cred, ok := mounts["/etc/trainyard/slurm"]
	if !ok || cred.SubPath != "" || !cred.ReadOnly {
		t.Fatalf("credential mount = %+v (present %v), want read-only /etc/trainyard/slurm without subPath", cred, ok)
	}
	vol := volume(t, d, cred.Name)
	if vol.Secret == nil || vol.Secret.SecretName != "slurm1-jwt" || vol.Secret.DefaultMode == nil || *vol.Secret.DefaultMode != 0o440 {
		t.Errorf("credential volume = %+v, want Secret slurm1-jwt mode 0440", vol.VolumeSource)
	}
	if fs := d.Spec.Template.Spec.SecurityContext.FSGroup; fs == nil {
		t.Error("no fsGroup: the non-root agent cannot read its 0440 credential")
	}
	topo, ok := mounts["/etc/trainyard/slurm-topology"]
	if !ok {
		t.Fatalf("topology ConfigMap not mounted: %+v", c.VolumeMounts)
	}
	if v := volume(t, d, topo.Name); v.ConfigMap == nil || v.ConfigMap.Name != "slurm1-topology" {
		t.Errorf("topology volume = %+v, want ConfigMap slurm1-topology", v.VolumeSource)
	}
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--slurm-") {
			t.Errorf("Slurm flag %q passed though its value is empty (the agent's default applies)", a)
		}
	}

	// The credential read from the hub (spec.slurm.auth.secretRef): nothing
	// mounted; the Slurm flags from values.
	d = as[appsv1.Deployment](t, slurmRelease("--set", "slurm.credentialSecret=", "--set", "slurm.serviceUser=slurm",
		"--set", "slurm.pollInterval=5s").render(t).one(t, "Deployment"))
	c = container(t, d, "agent")
	for _, m := range c.VolumeMounts {
		if m.MountPath == "/etc/trainyard/slurm" {
			t.Errorf("no credentialSecret, yet %s is mounted", m.MountPath)
		}
	}
	for _, a := range []string{"--slurm-service-user=slurm", "--slurm-poll-interval=5s"} {
		if !slices.Contains(c.Args, a) {
			t.Errorf("agent args %q lack %q", c.Args, a)
		}
	}
	if k := agentRelease("--set", "slurm.serviceUser=slurm").render(t); slices.ContainsFunc(container(t,
		as[appsv1.Deployment](t, k.one(t, "Deployment")), "agent").Args, func(a string) bool { return strings.HasPrefix(a, "--slurm-") }) {
		t.Error("a Kubernetes agent is passed Slurm flags")
	}
}

func flagValue(c *corev1.Container, flag string) string {
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

func volume(t *testing.T, d *appsv1.Deployment, name string) *corev1.Volume {
	t.Helper()
	for i, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == name {
			return &d.Spec.Template.Spec.Volumes[i]
		}
	}
	t.Fatalf("no volume %s", name)
	return nil
}

// secretFileOf resolves a file path in the container to "secret/key".
func secretFileOf(t *testing.T, d *appsv1.Deployment, c *corev1.Container, path string) string {
	t.Helper()
	for _, m := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		v := volume(t, d, m.Name)
		if v.Secret == nil {
			break
		}
		if len(v.Secret.Items) == 0 {
			return v.Secret.SecretName + "/" + rel
		}
		for _, it := range v.Secret.Items {
			if it.Path == rel {
				return v.Secret.SecretName + "/" + it.Key
			}
		}
	}
	t.Fatalf("%q is not a file of a mounted Secret", path)
	return ""
}

// checkElectionRBAC: the only namespaced RBAC the agent chart renders is its
// leader election's, in the release namespace: Leases (and the election's
// Events), bound to the agent's ServiceAccount, and the agent is told that
// namespace. Its tenant RoleBindings it makes itself.
func checkElectionRBAC(t *testing.T, objs objects, subject []rbacv1.Subject) {
	t.Helper()
	role := as[rbacv1.Role](t, objs.named(t, "Role", subject[0].Name+"-leader-election"))
	if role.Namespace != "trainyard-system" || !strings.HasSuffix(role.Name, "-leader-election") {
		t.Errorf("Role %s/%s, want the leader election's in the release namespace", role.Namespace, role.Name)
	}
	if !grants(role.Rules, "coordination.k8s.io", "leases", "get", "create", "update") {
		t.Errorf("leader-election Role = %+v, want Lease writes", role.Rules)
	}
	record := spoke.FenceRecordName(flagValue(container(t, as[appsv1.Deployment](t, objs.one(t, "Deployment")), "agent"), "--target"))
	for _, rule := range role.Rules {
		switch {
		case slices.Contains(rule.Resources, "leases") || slices.Contains(rule.Resources, "events"):
		case cmp.Equal(rule.Resources, []string{"configmaps"}) && len(rule.ResourceNames) == 0 && cmp.Equal(rule.Verbs, []string{"create"}):
		case cmp.Equal(rule.Resources, []string{"configmaps"}) && cmp.Equal(rule.ResourceNames, []string{record}):
			// The replicas' record of fence stops, and only it.
		default:
			t.Errorf("leader-election Role grants %v %v on %v", rule.Verbs, rule.Resources, rule.ResourceNames)
		}
	}
	if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
		return cmp.Equal(r.ResourceNames, []string{record}) && slices.Contains(r.Verbs, "get") && slices.Contains(r.Verbs, "patch")
	}) {
		t.Errorf("leader-election Role = %+v, want the fence record %s", role.Rules, record)
	}
	rb := as[rbacv1.RoleBinding](t, objs.named(t, "RoleBinding", subject[0].Name+"-leader-election"))
	if rb.RoleRef.Name != role.Name || rb.Namespace != role.Namespace || !cmp.Equal(subject, rb.Subjects) {
		t.Errorf("RoleBinding %s/%s %+v -> %+v, want %s -> %+v", rb.Namespace, rb.Name, rb.RoleRef, rb.Subjects, role.Name, subject)
	}
	c := container(t, as[appsv1.Deployment](t, objs.one(t, "Deployment")), "agent")
	if !slices.Contains(c.Args, "--leader-election-namespace=trainyard-system") {
		t.Errorf("agent args %q do not name the release namespace for the election", c.Args)
	}
}

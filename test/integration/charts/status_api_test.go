package charts

import (
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/trainyard-dev/trainyard/spoke"
)

// TestAgentStatusAPI: by default a Kubernetes agent serves Trainer's status
// API behind a Service that selects the elected replica's pod (the label
// the agent keeps with --status-pod, from the downward API) and leads to
// the port --status-listen names, under the name, namespace and port its
// flags give the trainer pods; its agent labels are the pods' own; its
// state directory is writable; it may review tokens, update the CA
// ConfigMap in tenant namespaces and label its pods. Turned off, none of it
// is there. A Slurm agent serves only with a URL, and reviews no token.
func TestAgentStatusAPI(t *testing.T) {
	objs := agentRelease().render(t)
	d := as[appsv1.Deployment](t, objs.one(t, "Deployment"))
	c := container(t, d, "agent")
	svc := checkStatusService(t, objs, d, c)
	if flagValue(c, "--status-service") != svc.Name || flagValue(c, "--status-service-namespace") != svc.Namespace ||
		flagValue(c, "--status-service-port") != "9443" || svc.Spec.Ports[0].Port != 9443 {
		t.Errorf("--status-service* = %s/%s:%s, want the Service %s/%s:%d", flagValue(c, "--status-service-namespace"),
			flagValue(c, "--status-service"), flagValue(c, "--status-service-port"), svc.Namespace, svc.Name, svc.Spec.Ports[0].Port)
	}
	labels := map[string]string{}
	for _, kv := range strings.Split(flagValue(c, "--status-agent-labels"), ",") {
		k, v, _ := strings.Cut(kv, "=")
		labels[k] = v
	}
	for k, v := range labels {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("--status-agent-labels %v: the agent's pods are labelled %v", labels, d.Spec.Template.Labels)
		}
	}
	if len(labels) < 2 {
		t.Errorf("--status-agent-labels %v would open the tenants' egress to too many pods", labels)
	}
	spokeRole := as[rbacv1.ClusterRole](t, objs.named(t, "ClusterRole", "trainyard-agent-spoke1-spoke"))
	if !grants(spokeRole.Rules, "authentication.k8s.io", "tokenreviews", "create") || !grants(spokeRole.Rules, "", "pods", "get") {
		t.Errorf("spoke ClusterRole = %+v, want TokenReviews and pod reads for the status API", spokeRole.Rules)
	}
	tenant := as[rbacv1.ClusterRole](t, objs.named(t, "ClusterRole", "trainyard-agent-spoke1-tenant"))
	if !slices.ContainsFunc(tenant.Rules, func(r rbacv1.PolicyRule) bool {
		return cmp.Equal(r.Resources, []string{"configmaps"}) && cmp.Equal(r.ResourceNames, []string{spoke.DefaultStatusCAConfigMap}) &&
			slices.Contains(r.Verbs, "update")
	}) || !grants(tenant.Rules, "", "configmaps", "get", "create") || !grants(tenant.Rules, "networking.k8s.io", "networkpolicies", "create") {
		t.Errorf("tenant ClusterRole = %+v, want the CA ConfigMap %s kept current and the egress exception", tenant.Rules, spoke.DefaultStatusCAConfigMap)
	}

	off := agentRelease("--set", "statusAPI.enabled=false").render(t)
	checkNoStatusAPI(t, off)
	if r := as[rbacv1.ClusterRole](t, off.named(t, "ClusterRole", spokeRole.Name)); grants(r.Rules, "authentication.k8s.io", "tokenreviews", "create") {
		t.Error("TokenReviews granted with the status API off")
	}

	checkNoStatusAPI(t, slurmRelease().render(t))
	s := slurmRelease("--set", "statusAPI.url=https://agent.cluster.example:30443", "--set", "statusAPI.service.type=NodePort",
		"--set", "statusAPI.stateVolume.persistentVolumeClaim.claimName=slurm1-status").render(t)
	d = as[appsv1.Deployment](t, s.one(t, "Deployment"))
	c = container(t, d, "agent")
	svc = checkStatusService(t, s, d, c)
	if svc.Spec.Type != corev1.ServiceTypeNodePort || flagValue(c, "--status-url") != "https://agent.cluster.example:30443" {
		t.Errorf("Slurm: Service type %s, --status-url %q; want NodePort and the URL", svc.Spec.Type, flagValue(c, "--status-url"))
	}
	for _, m := range c.VolumeMounts {
		if m.MountPath == flagValue(c, "--status-state-dir") {
			if v := volume(t, d, m.Name); v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "slurm1-status" {
				t.Errorf("Slurm status state volume = %+v, want the claim", v.VolumeSource)
			}
		}
	}
}

// checkStatusService checks what both backends share: the Service selects
// the elected replica's pod and leads to the listening port; the pod knows
// its name; the state directory is a writable volume; the agent may label
// its pods.
func checkStatusService(t *testing.T, objs objects, d *appsv1.Deployment, c *corev1.Container) *corev1.Service {
	t.Helper()
	svc := as[corev1.Service](t, objs.named(t, "Service", d.Name+"-status"))
	want := map[string]string{spoke.LabelStatusLeader: "true"}
	for k, v := range d.Spec.Selector.MatchLabels {
		want[k] = v
	}
	if diff := cmp.Diff(want, svc.Spec.Selector); diff != "" {
		t.Errorf("status Service selector (-want +got):\n%s", diff)
	}
	_, listen, _ := net.SplitHostPort(flagValue(c, "--status-listen"))
	port := svc.Spec.Ports[0]
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool {
		return p.Name == port.TargetPort.StrVal && listen != "" && strconv.Itoa(int(p.ContainerPort)) == listen
	}) {
		t.Errorf("Service targets %q, the container's ports are %+v and --status-listen=%s", port.TargetPort.StrVal, c.Ports, listen)
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
	}) {
		t.Errorf("the agent's env %+v does not name its pod (POD_NAME, the default of --status-pod)", c.Env)
	}
	dir := flagValue(c, "--status-state-dir")
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == dir && !m.ReadOnly }) {
		t.Errorf("--status-state-dir=%s is not a writable mount (the root filesystem is read-only): %+v", dir, c.VolumeMounts)
	}
	role := as[rbacv1.Role](t, objs.named(t, "Role", d.Name+"-status-leader"))
	if role.Namespace != svc.Namespace || !grants(role.Rules, "", "pods", "get", "list", "patch") {
		t.Errorf("Role %s/%s = %+v, want pod label patches beside the Service", role.Namespace, role.Name, role.Rules)
	}
	rb := as[rbacv1.RoleBinding](t, objs.named(t, "RoleBinding", role.Name))
	if rb.RoleRef.Name != role.Name || len(rb.Subjects) != 1 || rb.Subjects[0].Name != d.Spec.Template.Spec.ServiceAccountName {
		t.Errorf("RoleBinding %+v -> %+v, want %s -> the agent", rb.RoleRef, rb.Subjects, role.Name)
	}
	return svc
}

func checkNoStatusAPI(t *testing.T, objs objects) {
	t.Helper()
	for _, o := range objs {
		if strings.HasSuffix(o.GetName(), "-status") || strings.HasSuffix(o.GetName(), "-status-leader") {
			t.Errorf("status API off, yet %s is rendered", key(o))
		}
	}
	c := container(t, as[appsv1.Deployment](t, objs.one(t, "Deployment")), "agent")
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--status-") {
			t.Errorf("status API off, yet the agent gets %s", a)
		}
	}
}

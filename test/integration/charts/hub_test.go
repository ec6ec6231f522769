package charts

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/trainyard-dev/trainyard/hub/snapshot"
	"github.com/trainyard-dev/trainyard/hub/targets"
	"github.com/trainyard-dev/trainyard/hub/tenantview"
)

// TestHubChartCopiesAreCurrent fails when the chart's CRDs or its copy of
// the hub role differ from what controller-gen generated into config/.
func TestHubChartCopiesAreCurrent(t *testing.T) {
	root := repoRoot()
	generated, _ := filepath.Glob(filepath.Join(root, "config/crd/bases/*.yaml"))
	copied, _ := filepath.Glob(chartPath(hubChart, "crds/*.yaml"))
	if len(generated) == 0 {
		t.Fatal("config/crd/bases holds no CRDs")
	}
	base := func(ps []string) []string {
		var out []string
		for _, p := range ps {
			out = append(out, filepath.Base(p))
		}
		return out
	}
	if diff := cmp.Diff(base(generated), base(copied)); diff != "" {
		t.Errorf("charts/%s/crds lists other files than config/crd/bases: run `make charts` (-generated +chart):\n%s", hubChart, diff)
	}
	same := func(a, b string) {
		x, errA := os.ReadFile(a)
		y, errB := os.ReadFile(b)
		if errA != nil || errB != nil || !bytes.Equal(x, y) {
			t.Errorf("%s differs from %s: run `make charts`", b, a)
		}
	}
	for _, g := range generated {
		same(g, chartPath(hubChart, "crds", filepath.Base(g)))
	}
	same(filepath.Join(root, "config/rbac/hub/role.yaml"), chartPath(hubChart, "files/hub-role.yaml"))
}

// TestHubRBAC: the chart's ClusterRole grants exactly the generated role,
// bound to the chart's ServiceAccount; leader election gets a Role of its
// own in the release namespace.
func TestHubRBAC(t *testing.T) {
	objs := hubRelease().render(t)
	var generated rbacv1.ClusterRole
	readYAML(t, "config/rbac/hub/role.yaml", &generated)
	if len(generated.Rules) == 0 {
		t.Fatal("config/rbac/hub/role.yaml has no rules")
	}
	role := as[rbacv1.ClusterRole](t, objs.named(t, "ClusterRole", "trainyard-hub"))
	if diff := cmp.Diff(generated.Rules, role.Rules); diff != "" {
		t.Errorf("ClusterRole rules differ from config/rbac/hub/role.yaml (-generated +chart):\n%s", diff)
	}
	sa := objs.one(t, "ServiceAccount")
	wantSubject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.GetName(), Namespace: releaseNS}}
	binding := as[rbacv1.ClusterRoleBinding](t, objs.one(t, "ClusterRoleBinding"))
	if binding.RoleRef.Name != role.Name || binding.RoleRef.Kind != "ClusterRole" {
		t.Errorf("ClusterRoleBinding refers to %+v, want ClusterRole %s", binding.RoleRef, role.Name)
	}
	if diff := cmp.Diff(wantSubject, binding.Subjects); diff != "" {
		t.Errorf("ClusterRoleBinding subjects (-want +got):\n%s", diff)
	}

	le := as[rbacv1.Role](t, objs.one(t, "Role"))
	if le.Namespace != releaseNS {
		t.Errorf("leader-election Role in namespace %q, want %q", le.Namespace, releaseNS)
	}
	if !grants(le.Rules, "coordination.k8s.io", "leases", "get", "create", "update") {
		t.Errorf("leader-election Role does not grant leases get/create/update: %+v", le.Rules)
	}
	leb := as[rbacv1.RoleBinding](t, objs.one(t, "RoleBinding"))
	if leb.RoleRef.Name != le.Name || !cmp.Equal(wantSubject, leb.Subjects) {
		t.Errorf("leader-election RoleBinding = %+v -> %+v, want %s -> %+v", leb.RoleRef, leb.Subjects, le.Name, wantSubject)
	}

	if got := hubRelease("--set", "leaderElection.enabled=false").render(t); len(got.ofKind("Role")) != 0 {
		t.Errorf("leader election off still renders a Role")
	}
}

// grants reports whether one of rules allows every verb on group/resource.
func grants(rules []rbacv1.PolicyRule, group, resource string, verbs ...string) bool {
	for _, r := range rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && len(r.ResourceNames) == 0 {
			ok := true
			for _, v := range verbs {
				ok = ok && (slices.Contains(r.Verbs, v) || slices.Contains(r.Verbs, "*"))
			}
			if ok {
				return true
			}
		}
	}
	return false
}

// TestHubDeployment: leader election on, probes on the probe port, the
// hardened security context, resources and the image from values.
func TestHubDeployment(t *testing.T) {
	objs := hubRelease().render(t)
	d := as[appsv1.Deployment](t, objs.one(t, "Deployment"))
	c := container(t, d, "hub")
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %v, want 2", d.Spec.Replicas)
	}
	wantArgs := []string{
		"--leader-elect=true", "--leader-election-namespace=" + releaseNS,
		"--metrics-bind-address=:8080", "--health-probe-bind-address=:8081",
		"--webhook-port=9443", "--agent-lease-duration=40s", "--lost-target-grace=20s",
		"--disruption-threshold=0.55",
	}
	for _, a := range wantArgs {
		if !slices.Contains(c.Args, a) {
			t.Errorf("hub args %q lack %q", c.Args, a)
		}
	}
	checkProbes(t, c, 8081)
	checkHardened(t, d, c)
	if want := "ghcr.io/trainyard-dev/trainyard-hub:0.1.0"; c.Image != want {
		t.Errorf("image = %q, want %q (the chart's appVersion)", c.Image, want)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources = %+v, want CPU requests and a memory limit", c.Resources)
	}
	// The Go runtime must know the limit, or its heap grows to twice the
	// live data (GOGC 100) and the kernel kills it first.
	memLimit := slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "GOMEMLIMIT" && e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil &&
			e.ValueFrom.ResourceFieldRef.Resource == "limits.memory"
	})
	if !memLimit {
		t.Errorf("hub env %+v: want GOMEMLIMIT from limits.memory", c.Env)
	}
	if d.Spec.Template.Spec.ServiceAccountName != objs.one(t, "ServiceAccount").GetName() {
		t.Errorf("pod runs as %q, not the chart's ServiceAccount", d.Spec.Template.Spec.ServiceAccountName)
	}

	d = as[appsv1.Deployment](t, hubRelease("--set", "image.tag=v9.9.9", "--set", "replicas=3",
		"--set", "extraArgs={--zap-log-level=debug}").render(t).one(t, "Deployment"))
	c = container(t, d, "hub")
	if !strings.HasSuffix(c.Image, ":v9.9.9") || *d.Spec.Replicas != 3 || !slices.Contains(c.Args, "--zap-log-level=debug") {
		t.Errorf("values not applied: image %q, replicas %d, args %q", c.Image, *d.Spec.Replicas, c.Args)
	}
}

func container(t *testing.T, d *appsv1.Deployment, name string) *corev1.Container {
	t.Helper()
	for i, c := range d.Spec.Template.Spec.Containers {
		if c.Name == name {
			return &d.Spec.Template.Spec.Containers[i]
		}
	}
	t.Fatalf("Deployment %s has no container %s", d.Name, name)
	return nil
}

// portOf is the container port named name.
func portOf(c *corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

// checkProbes: liveness /healthz and readiness /readyz on the named port
// that is the --health-probe-bind-address port.
func checkProbes(t *testing.T, c *corev1.Container, port int32) {
	t.Helper()
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s probe missing", p.name)
			continue
		}
		if p.probe.HTTPGet.Path != p.path || portOf(c, p.probe.HTTPGet.Port.String()) != port {
			t.Errorf("%s probe %s on port %s (=%d), want %s on %d", p.name, p.probe.HTTPGet.Path,
				p.probe.HTTPGet.Port.String(), portOf(c, p.probe.HTTPGet.Port.String()), p.path, port)
		}
	}
}

// checkHardened: non-root, read-only root file system, no privilege
// escalation, every capability dropped.
func checkHardened(t *testing.T, d *appsv1.Deployment, c *corev1.Container) {
	t.Helper()
	pod := d.Spec.Template.Spec.SecurityContext
	if pod == nil || pod.RunAsNonRoot == nil || !*pod.RunAsNonRoot {
		t.Errorf("pod securityContext %+v does not require a non-root user", pod)
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container securityContext = %+v, want read-only root, no privilege escalation, drop ALL", sc)
	}
}

// TestHubWebhook renders the pinning webhook with and without cert-manager:
// the same webhook as hub/snapshot.WebhookConfiguration, served through the
// chart's Service, with its certificate where the Deployment mounts it.
func TestHubWebhook(t *testing.T) {
	for _, tc := range []struct {
		name       string
		values     []string
		secret     string
		injectFrom string
		caBundle   string
		issuer     string // Certificate's issuer; "" means no Certificate
		issuerObjs int
	}{
		{name: "cert-manager, self-signed", secret: "trainyard-hub-webhook-cert",
			injectFrom: releaseNS + "/trainyard-hub-webhook", issuer: "Issuer/trainyard-hub-selfsigned", issuerObjs: 1},
		{name: "cert-manager, cluster issuer", values: []string{"--set", "certManager.issuerRef.name=corp-ca", "--set", "certManager.issuerRef.kind=ClusterIssuer"},
			secret: "trainyard-hub-webhook-cert", injectFrom: releaseNS + "/trainyard-hub-webhook", issuer: "ClusterIssuer/corp-ca"},
		{name: "own secret", values: []string{"--set", "certManager.enabled=false", "--set", "webhook.certSecretName=my-cert", "--set", "webhook.caBundle=Q0EK"},
			secret: "my-cert", caBundle: "CA\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := hubRelease(tc.values...).render(t)
			mwc := as[admissionregv1.MutatingWebhookConfiguration](t, objs.one(t, "MutatingWebhookConfiguration"))
			want := snapshot.WebhookConfiguration("", nil)
			if mwc.Name != want.Name {
				t.Errorf("MutatingWebhookConfiguration %q, want %q", mwc.Name, want.Name)
			}
			if diff := cmp.Diff(want.Webhooks, mwc.Webhooks, cmpopts.IgnoreFields(admissionregv1.MutatingWebhook{}, "ClientConfig")); diff != "" {
				t.Errorf("webhook differs from hub/snapshot.WebhookConfiguration (-snapshot +chart):\n%s", diff)
			}
			svc := as[corev1.Service](t, objs.named(t, "Service", "trainyard-hub-webhook"))
			cc := mwc.Webhooks[0].ClientConfig
			wantSvc := &admissionregv1.ServiceReference{Namespace: releaseNS, Name: svc.Name, Path: ptrTo(snapshot.WebhookPath), Port: ptrTo[int32](443)}
			if diff := cmp.Diff(wantSvc, cc.Service); diff != "" {
				t.Errorf("webhook clientConfig.service (-want +got):\n%s", diff)
			}
			if string(cc.CABundle) != tc.caBundle {
				t.Errorf("caBundle = %q, want %q", cc.CABundle, tc.caBundle)
			}
			if got := mwc.Annotations["cert-manager.io/inject-ca-from"]; got != tc.injectFrom {
				t.Errorf("inject-ca-from = %q, want %q", got, tc.injectFrom)
			}
			d := as[appsv1.Deployment](t, objs.one(t, "Deployment"))
			c := container(t, d, "hub")
			if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 443 || portOf(c, svc.Spec.Ports[0].TargetPort.String()) != 9443 {
				t.Errorf("webhook Service ports %+v do not reach the container's webhook port 9443", svc.Spec.Ports)
			}
			if got := certSecretOf(t, d, c); got != tc.secret {
				t.Errorf("the hub mounts Secret %q at its --webhook-cert-dir, want %q", got, tc.secret)
			}
			certs := objs.ofKind("Certificate")
			if len(objs.ofKind("Issuer")) != tc.issuerObjs {
				t.Errorf("%d Issuers rendered, want %d", len(objs.ofKind("Issuer")), tc.issuerObjs)
			}
			if tc.issuer == "" {
				if len(certs) != 0 {
					t.Errorf("certManager off still renders %v", certs.keys())
				}
				return
			}
			if len(certs) != 1 {
				t.Fatalf("want 1 Certificate, got %v", certs.keys())
			}
			cert := certs[0].Object["spec"].(map[string]any)
			issuer := cert["issuerRef"].(map[string]any)
			if cert["secretName"] != tc.secret || issuer["kind"].(string)+"/"+issuer["name"].(string) != tc.issuer {
				t.Errorf("Certificate spec = %v, want secret %s from %s", cert, tc.secret, tc.issuer)
			}
			dns := svc.Name + "." + releaseNS + ".svc"
			if names, _ := cert["dnsNames"].([]any); !slices.Contains(names, any(dns)) {
				t.Errorf("Certificate dnsNames %v lack %s", cert["dnsNames"], dns)
			}
			if releaseNS+"/"+certs[0].GetName() != tc.injectFrom {
				t.Errorf("inject-ca-from %q does not name Certificate %s", tc.injectFrom, key(certs[0]))
			}
		})
	}
	t.Run("webhook off", func(t *testing.T) {
		objs := hubRelease("--set", "webhook.enabled=false").render(t)
		if n := len(objs.ofKind("MutatingWebhookConfiguration")) + len(objs.ofKind("Certificate")); n != 0 {
			t.Errorf("webhook off still renders its configuration or certificate: %v", objs.keys())
		}
		c := container(t, as[appsv1.Deployment](t, objs.one(t, "Deployment")), "hub")
		if !slices.Contains(c.Args, "--webhook-port=0") {
			t.Errorf("webhook off, args %q lack --webhook-port=0", c.Args)
		}
	})
}

// certSecretOf is the Secret mounted at the hub's --webhook-cert-dir.
func certSecretOf(t *testing.T, d *appsv1.Deployment, c *corev1.Container) string {
	t.Helper()
	dir := ""
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--webhook-cert-dir="); ok {
			dir = v
		}
	}
	for _, m := range c.VolumeMounts {
		if m.MountPath != dir {
			continue
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				return v.Secret.SecretName
			}
		}
	}
	t.Fatalf("no Secret volume mounted at --webhook-cert-dir %q", dir)
	return ""
}

func ptrTo[T any](v T) *T { return &v }

// TestHubAdmissionPolicies: the chart ships the admission policies and
// bindings the hub relies on, as hub/snapshot.PinnedRuntimePolicy,
// hub/tenantview.RequesterPolicy and hub/targets.DispatchWriterPolicy build
// them (the hub may not install them itself); the pinned-runtime one can be
// turned off, the requester one, without which the hub answers no
// LogRequest, and the Dispatch writers one, which keeps agents to their
// finalizer and their Target's Dispatches, cannot.
func TestHubAdmissionPolicies(t *testing.T) {
	objs := hubRelease().render(t)
	pinned, pinnedBinding := snapshot.PinnedRuntimePolicy()
	requester, requesterBinding := tenantview.RequesterPolicy()
	writers, writersBinding := targets.DispatchWriterPolicy()
	for _, want := range []struct {
		policy  *admissionregv1.ValidatingAdmissionPolicy
		binding *admissionregv1.ValidatingAdmissionPolicyBinding
		source  string
	}{{pinned, pinnedBinding, "hub/snapshot"}, {requester, requesterBinding, "hub/tenantview"}, {writers, writersBinding, "hub/targets"}} {
		policy := as[admissionregv1.ValidatingAdmissionPolicy](t, objs.named(t, "ValidatingAdmissionPolicy", want.policy.Name))
		binding := as[admissionregv1.ValidatingAdmissionPolicyBinding](t, objs.named(t, "ValidatingAdmissionPolicyBinding", want.binding.Name))
		if diff := cmp.Diff(want.policy.Spec, policy.Spec); diff != "" {
			t.Errorf("ValidatingAdmissionPolicy %s differs from %s (-%s +chart):\n%s", policy.Name, want.source, want.source, diff)
		}
		if diff := cmp.Diff(want.binding.Spec, binding.Spec); diff != "" {
			t.Errorf("ValidatingAdmissionPolicyBinding %s differs from %s (-%s +chart):\n%s", binding.Name, want.source, want.source, diff)
		}
	}
	if n := len(objs.ofKind("ValidatingAdmissionPolicy")); n != 3 {
		t.Errorf("the chart renders %d ValidatingAdmissionPolicies, want 3: %v", n, objs.ofKind("ValidatingAdmissionPolicy").keys())
	}
	off := hubRelease("--set", "pinnedRuntimePolicy.enabled=false").render(t)
	var left []string
	for _, o := range off.ofKind("ValidatingAdmissionPolicy") {
		left = append(left, o.GetName())
	}
	slices.Sort(left)
	if want := []string{targets.DispatchWriterPolicyName, tenantview.RequesterPolicyName}; !slices.Equal(left, want) {
		t.Errorf("pinnedRuntimePolicy.enabled=false renders policies %v, want only %v", left, want)
	}
	// The hub reads the requester policy and may write no policy at all.
	var role rbacv1.ClusterRole
	readYAML(t, "config/rbac/hub/role.yaml", &role)
	for _, r := range role.Rules {
		if !slices.Contains(r.APIGroups, "admissionregistration.k8s.io") {
			continue
		}
		if !slices.Equal(r.Verbs, []string{"get"}) || !slices.Equal(r.ResourceNames, []string{tenantview.RequesterPolicyName}) {
			t.Errorf("the hub role grants %v on %v (names %v), want only get of %s", r.Verbs, r.Resources, r.ResourceNames, tenantview.RequesterPolicyName)
		}
	}
}

// TestServiceMonitorToggle: both charts have a metrics Service, and a
// ServiceMonitor scraping it only when metrics.serviceMonitor.enabled.
func TestServiceMonitorToggle(t *testing.T) {
	for _, r := range []func(...string) release{hubRelease, agentRelease, slurmRelease} {
		rel := r()
		t.Run(rel.name, func(t *testing.T) {
			objs := rel.render(t)
			if sm := objs.ofKind("ServiceMonitor"); len(sm) != 0 {
				t.Errorf("ServiceMonitor rendered by default: %v", sm.keys())
			}
			metrics := metricsService(t, objs)
			on := r("--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.labels.release=prom").render(t)
			sm := on.one(t, "ServiceMonitor")
			spec := sm.Object["spec"].(map[string]any)
			sel := spec["selector"].(map[string]any)["matchLabels"].(map[string]any)
			for k, v := range sel {
				if metrics.Labels[k] != v {
					t.Errorf("ServiceMonitor selects %s=%v, the metrics Service has %q", k, v, metrics.Labels[k])
				}
			}
			ep := spec["endpoints"].([]any)[0].(map[string]any)
			if ep["port"] != metrics.Spec.Ports[0].Name || ep["path"] != "/metrics" {
				t.Errorf("ServiceMonitor endpoint %v, want port %s path /metrics", ep, metrics.Spec.Ports[0].Name)
			}
			if sm.GetLabels()["release"] != "prom" {
				t.Errorf("ServiceMonitor labels %v lack release=prom", sm.GetLabels())
			}
			for _, o := range on.ofKind("ServiceMonitor") {
				if o.GetNamespace() != releaseNS {
					t.Errorf("%s not in the release namespace", key(o))
				}
			}
		})
	}
}

// metricsService is the Service whose port "metrics" reaches the
// container's metrics port, the one --metrics-bind-address serves.
func metricsService(t *testing.T, objs objects) *corev1.Service {
	t.Helper()
	d := as[appsv1.Deployment](t, objs.one(t, "Deployment"))
	c := &d.Spec.Template.Spec.Containers[0]
	for _, u := range objs.ofKind("Service") {
		svc := as[corev1.Service](t, u)
		if len(svc.Spec.Ports) == 1 && svc.Spec.Ports[0].Name == "metrics" {
			addr := ""
			for _, a := range c.Args {
				if v, ok := strings.CutPrefix(a, "--metrics-bind-address=:"); ok {
					addr = v
				}
			}
			if port := portOf(c, svc.Spec.Ports[0].TargetPort.String()); addr == "" || port == 0 || addr != strconv.Itoa(int(port)) {
				t.Errorf("metrics Service targets container port %d, --metrics-bind-address port is %q", port, addr)
			}
			for k, v := range svc.Spec.Selector {
				if d.Spec.Template.Labels[k] != v {
					t.Errorf("metrics Service selector %s=%s does not match the pods", k, v)
				}
			}
			return svc
		}
	}
	t.Fatalf("no metrics Service among %v", objs.keys())
	return nil
}

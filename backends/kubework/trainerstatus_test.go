package kubework

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/kubeflow/trainer/v2/pkg/statusserver"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// TestWithTrainerStatus: every container gets Trainer's three variables
// (a tenant's own value replaced) and the token volume's mount; the pod
// gets one projected volume with the TrainJob's audience and the CA.
func TestWithTrainerStatus(t *testing.T) {
	spec := &corev1.PodSpec{Containers: []corev1.Container{
		{Name: "node", Env: []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: EnvTrainerServerURL, Value: "https://tenant.example/steal"}}},
		{Name: "sidecar"},
	}}
	ep := StatusEndpoint{BaseURL: "https://trainyard-agent-status.trainyard-agent.svc:9443", CAConfigMap: "trainyard-status-ca"}
	WithTrainerStatus(spec, ep, "team-a", "train")
	WithTrainerStatus(spec, ep, "team-a", "train") // twice: nothing doubles

	wantEnv := []corev1.EnvVar{
		{Name: EnvTrainerServerURL, Value: ep.BaseURL + statusserver.StatusUrl("team-a", "train")},
		{Name: EnvTrainerServerCACert, Value: "/var/run/secrets/kubeflow/trainer/ca.crt"},
		{Name: EnvTrainerServerToken, Value: "/var/run/secrets/kubeflow/trainer/token"},
	}
	if diff := cmp.Diff(append([]corev1.EnvVar{{Name: "A", Value: "1"}}, wantEnv[0], wantEnv[1], wantEnv[2]), spec.Containers[0].Env); diff != "" {
		t.Errorf("node env (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantEnv, spec.Containers[1].Env); diff != "" {
		t.Errorf("sidecar env (-want +got):\n%s", diff)
	}
	for _, c := range spec.Containers {
		if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != TrainerStatusMountPath || !c.VolumeMounts[0].ReadOnly {
			t.Errorf("%s mounts %+v, want the token volume read-only", c.Name, c.VolumeMounts)
		}
	}
	if spec.ServiceAccountName != "default" {
		t.Errorf("service account %q, want default for the projected token", spec.ServiceAccountName)
	}
	if len(spec.Volumes) != 1 || spec.Volumes[0].Projected == nil || len(spec.Volumes[0].Projected.Sources) != 2 {
		t.Fatalf("volumes %+v, want one projected volume of token and CA", spec.Volumes)
	}
	src := spec.Volumes[0].Projected.Sources
	if got := src[0].ServiceAccountToken; got == nil || got.Audience != statusserver.TokenAudience("team-a", "train") || got.Path != "token" {
		t.Errorf("token projection %+v, want the TrainJob's audience", got)
	}
	if got := src[1].ConfigMap; got == nil || got.Name != ep.CAConfigMap || got.Items[0].Key != "ca.crt" {
		t.Errorf("CA projection %+v, want %s's ca.crt", got, ep.CAConfigMap)
	}
}

// TestStatusEgressPolicy: the tenant's pods may reach the agent's pods in
// the agent namespace on the status port over TCP, and only those: both
// selectors sit in one peer, so neither alone opens anything.
func TestStatusEgressPolicy(t *testing.T) {
	p := StatusEgressPolicy("jobs-team-a", "trainyard-agent", map[string]string{"app": "trainyard-agent"}, 9443)
	if len(p.Spec.Egress) != 1 || len(p.Spec.Ingress) != 0 || len(p.Spec.PolicyTypes) != 1 || p.Spec.PolicyTypes[0] != "Egress" {
		t.Fatalf("policy %+v, want one egress rule", p.Spec)
	}
	if len(p.Spec.PodSelector.MatchLabels) != 0 {
		t.Errorf("applies to %v, want every pod of the namespace", p.Spec.PodSelector)
	}
	rule := p.Spec.Egress[0]
	if len(rule.To) != 1 || rule.To[0].NamespaceSelector == nil || rule.To[0].PodSelector == nil ||
		rule.To[0].NamespaceSelector.MatchLabels[corev1.LabelMetadataName] != "trainyard-agent" || rule.To[0].PodSelector.MatchLabels["app"] != "trainyard-agent" {
		t.Errorf("peers %+v, want the agent's pods in its namespace", rule.To)
	}
	if len(rule.Ports) != 1 || *rule.Ports[0].Protocol != corev1.ProtocolTCP || rule.Ports[0].Port.IntVal != 9443 {
		t.Errorf("ports %+v, want TCP 9443", rule.Ports)
	}
}

// TestNamespacesGiveStatusAccess: a tenant namespace made ready with a
// status endpoint holds the agent's CA and the egress exception, and a new
// CA (an agent restarted) replaces the old one at the next check.
func TestNamespacesGiveStatusAccess(t *testing.T) {
	ctx := context.Background()
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	c := fake.NewClientBuilder().WithScheme(s).Build()
	access := &StatusAccess{Endpoint: StatusEndpoint{BaseURL: "https://agent.trainyard.svc:9443", CAConfigMap: "trainyard-status-ca"},
		CA: []byte("ca-1"), AgentNamespace: "trainyard", AgentLabels: map[string]string{"app": "agent"}, Port: 9443}
	n := &Namespaces{Prefix: "jobs", Level: v1alpha1.PodSecurityRestricted, Status: access}
	for _, ca := range []string{"ca-1", "ca-2"} {
		access.CA = []byte(ca)
		if err := n.ensure(ctx, c, "jobs-team-a", "team-a", n.Level, nil); err != nil {
			t.Fatal(err)
		}
		var cm corev1.ConfigMap
		if err := c.Get(ctx, client.ObjectKey{Namespace: "jobs-team-a", Name: "trainyard-status-ca"}, &cm); err != nil {
			t.Fatal(err)
		}
		if cm.Data["ca.crt"] != ca {
			t.Errorf("CA ConfigMap holds %q, want %q", cm.Data["ca.crt"], ca)
		}
	}
	var p networkingv1.NetworkPolicy
	if err := c.Get(ctx, client.ObjectKey{Namespace: "jobs-team-a", Name: PolicyAllowStatus}, &p); err != nil {
		t.Errorf("egress exception: %v", err)
	}
}

package kubework

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// TestEgressPolicy: the Target's egress rules become one IP-block peer
// each, protocol TCP unless set, ranges kept; no rules allow nothing.
func TestEgressPolicy(t *testing.T) {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	port := func(p int32) *intstr.IntOrString { v := intstr.FromInt32(p); return &v }
	for _, tc := range []struct {
		name string
		in   []v1alpha1.EgressRule
		want []networkingv1.NetworkPolicyEgressRule
	}{
		{name: "none", in: nil, want: nil},
		{
			name: "a block on every port",
			in:   []v1alpha1.EgressRule{{CIDR: "10.20.0.0/16", Except: []string{"10.20.5.0/24"}}},
			want: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{
				IPBlock: &networkingv1.IPBlock{CIDR: "10.20.0.0/16", Except: []string{"10.20.5.0/24"}}}}}},
		},
		{
			name: "ports, a range and a default protocol",
			in: []v1alpha1.EgressRule{
				{CIDR: "192.0.2.10/32", Ports: []v1alpha1.EgressPort{{Port: 443}, {Protocol: v1alpha1.EgressProtocolUDP, Port: 5000, EndPort: ptr.To[int32](5010)}}},
				{CIDR: "2001:db8::/48"},
			},
			want: []networkingv1.NetworkPolicyEgressRule{
				{
					To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "192.0.2.10/32"}}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: port(443)},
						{Protocol: &udp, Port: port(5000), EndPort: ptr.To[int32](5010)}},
				},
				{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "2001:db8::/48"}}}},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := EgressPolicy("tenants-team-a", tc.in)
			if p.Name != PolicyAllowEgress || p.Namespace != "tenants-team-a" {
				t.Errorf("policy %s/%s", p.Namespace, p.Name)
			}
			if len(p.Spec.PodSelector.MatchLabels)+len(p.Spec.PodSelector.MatchExpressions) != 0 {
				t.Errorf("selects %v, want every pod of the namespace", p.Spec.PodSelector)
			}
			if diff := cmp.Diff([]networkingv1.PolicyType{networkingv1.PolicyTypeEgress}, p.Spec.PolicyTypes); diff != "" {
				t.Errorf("policy types (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, p.Spec.Egress); diff != "" {
				t.Errorf("egress (-want +got):\n%s", diff)
			}
			if len(p.Spec.Ingress) != 0 {
				t.Errorf("the egress allowance allows ingress: %v", p.Spec.Ingress)
			}
		})
	}
}

// TestTenantNetworkPolicies: every tenant namespace has the default deny,
// the DNS exception and the egress allowance, and nothing else.
func TestTenantNetworkPolicies(t *testing.T) {
	var names []string
	for _, p := range TenantNetworkPolicies("ns", nil) {
		names = append(names, p.Name)
		if p.Namespace != "ns" {
			t.Errorf("%s in namespace %q", p.Name, p.Namespace)
		}
	}
	if diff := cmp.Diff([]string{PolicyDefaultDeny, PolicyAllowDNS, PolicyAllowEgress}, names); diff != "" {
		t.Errorf("policies (-want +got):\n%s", diff)
	}
}

// TestNamespacesUpdate reports a change only when the level or the egress
// rules differ.
func TestNamespacesUpdate(t *testing.T) {
	n := &Namespaces{Prefix: "p", Level: v1alpha1.PodSecurityBaseline}
	rules := []v1alpha1.EgressRule{{CIDR: "10.0.0.0/8"}}
	for i, step := range []struct {
		level  v1alpha1.PodSecurityLevel
		egress []v1alpha1.EgressRule
		want   bool
	}{
		{v1alpha1.PodSecurityBaseline, nil, false},
		{v1alpha1.PodSecurityBaseline, rules, true},
		{v1alpha1.PodSecurityBaseline, []v1alpha1.EgressRule{{CIDR: "10.0.0.0/8"}}, false},
		{v1alpha1.PodSecurityRestricted, rules, true},
		{v1alpha1.PodSecurityRestricted, nil, true},
	} {
		if got := n.Update(step.level, step.egress); got != step.want {
			t.Errorf("step %d: Update(%s, %v) = %v, want %v", i, step.level, step.egress, got, step.want)
		}
	}
}

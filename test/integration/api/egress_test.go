package api

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// TestEgressValidation: spec.kubernetes.networkPolicy.egress takes IPv4
// and IPv6 blocks, exceptions strictly inside them and ports or ranges in
// order; anything else is refused with a message naming the rule.
func TestEgressValidation(t *testing.T) {
	cases := map[string]struct {
		rule    v1alpha1.EgressRule
		wantErr string
	}{
		"IPv4 block":            {rule: v1alpha1.EgressRule{CIDR: "10.20.0.0/16"}},
		"IPv6 block":            {rule: v1alpha1.EgressRule{CIDR: "2001:db8::/48"}},
		"everything":            {rule: v1alpha1.EgressRule{CIDR: "0.0.0.0/0", Except: []string{"169.254.169.254/32"}}},
		"ports and a range":     {rule: v1alpha1.EgressRule{CIDR: "192.0.2.0/24", Ports: []v1alpha1.EgressPort{{Port: 443}, {Protocol: v1alpha1.EgressProtocolUDP, Port: 5000, EndPort: ptr.To[int32](5010)}}}},
		"not a CIDR":            {rule: v1alpha1.EgressRule{CIDR: "storage.example.com"}, wantErr: "cidr must be an IPv4 or IPv6 CIDR"},
		"an address, no prefix": {rule: v1alpha1.EgressRule{CIDR: "10.0.0.1"}, wantErr: "cidr must be an IPv4 or IPv6 CIDR"},
		"except outside":        {rule: v1alpha1.EgressRule{CIDR: "10.20.0.0/16", Except: []string{"10.30.0.0/24"}}, wantErr: "strictly inside cidr"},
		"except is the block":   {rule: v1alpha1.EgressRule{CIDR: "10.20.0.0/16", Except: []string{"10.20.0.0/16"}}, wantErr: "strictly inside cidr"},
		"except not a CIDR":     {rule: v1alpha1.EgressRule{CIDR: "10.20.0.0/16", Except: []string{"nope"}}, wantErr: "strictly inside cidr"},
		"range backwards":       {rule: v1alpha1.EgressRule{CIDR: "10.0.0.0/8", Ports: []v1alpha1.EgressPort{{Port: 5010, EndPort: ptr.To[int32](5000)}}}, wantErr: "endPort must not be below port"},
		"port zero":             {rule: v1alpha1.EgressRule{CIDR: "10.0.0.0/8", Ports: []v1alpha1.EgressPort{{Port: 0}}}, wantErr: "port"},
		"unknown protocol":      {rule: v1alpha1.EgressRule{CIDR: "10.0.0.0/8", Ports: []v1alpha1.EgressPort{{Protocol: "ICMP", Port: 1}}}, wantErr: "protocol"},
	}
	i := 0
	for name, tc := range cases {
		i++
		t.Run(name, func(t *testing.T) {
			tg := tytesting.MakeKubernetesTarget(fmt.Sprintf("k-egress-%d", i), "gpu").Obj()
			tg.Spec.Kubernetes.NetworkPolicy = &v1alpha1.TenantNetworkPolicy{Egress: []v1alpha1.EgressRule{tc.rule}}
			err := k8sClient.Create(context.Background(), tg)
			checkAdmission(t, err, tc.wantErr)
			if err == nil {
				for _, p := range tg.Spec.Kubernetes.NetworkPolicy.Egress[0].Ports {
					if p.Protocol == "" {
						t.Errorf("port %d has no protocol, want the default TCP", p.Port)
					}
				}
			}
		})
	}
}

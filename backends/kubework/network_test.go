package kubework

import (
	"strconv"
	"testing"

	"github.com/mattfenwick/cyclonus/pkg/matcher"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// TestTenantTraffic evaluates the NetworkPolicies the agent writes (two
// tenant namespaces, one with an egress allowance, and three jobs) with
// cyclonus's policy engine, as a network plugin that implements
// NetworkPolicies would: a job's pods reach each other and DNS, nothing
// of another job or tenant, and outside the cluster only what the Target
// allows.
func TestTenantTraffic(t *testing.T) {
	const jobKey = "jobset.sigs.k8s.io/jobset-name"
	nsA, nsB := TenantNamespace("", "team-a"), TenantNamespace("", "team-b")
	store := []v1alpha1.EgressRule{{CIDR: "10.20.0.0/16", Except: []string{"10.20.9.0/24"}, Ports: []v1alpha1.EgressPort{{Port: 443}}}}
	var policies []*networkingv1.NetworkPolicy
	policies = append(policies, TenantNetworkPolicies(nsA, store)...)
	policies = append(policies, TenantNetworkPolicies(nsB, nil)...)
	// Job "train" exists in both tenants under the same name.
	policies = append(policies, JobNetworkPolicy(nsA, "train", jobKey, "train"), JobNetworkPolicy(nsA, "eval", jobKey, "eval"),
		JobNetworkPolicy(nsB, "train", jobKey, "train"))
	engine := matcher.BuildNetworkPolicies(false, policies)

	nsLabels := map[string]map[string]string{
		nsA:                     TenantNamespaceObject(nsA, "team-a", v1alpha1.PodSecurityBaseline).Labels,
		nsB:                     TenantNamespaceObject(nsB, "team-b", v1alpha1.PodSecurityBaseline).Labels,
		metav1.NamespaceSystem:  {corev1.LabelMetadataName: metav1.NamespaceSystem},
		metav1.NamespaceDefault: {corev1.LabelMetadataName: metav1.NamespaceDefault},
	}
	// Pod addresses matter too: an IP block matches pods by address.
	ips := 0
	podIP := func() string { ips++; return "10.244.0." + strconv.Itoa(ips) }
	pod := func(ns, job string) *matcher.TrafficPeer {
		return &matcher.TrafficPeer{IP: podIP(), Internal: &matcher.InternalPeer{Namespace: ns, NamespaceLabels: nsLabels[ns],
			PodLabels: map[string]string{jobKey: job}}}
	}
	dns := &matcher.TrafficPeer{IP: podIP(), Internal: &matcher.InternalPeer{Namespace: metav1.NamespaceSystem,
		NamespaceLabels: nsLabels[metav1.NamespaceSystem], PodLabels: map[string]string{"k8s-app": "kube-dns"}}}
	outside := func(ip string) *matcher.TrafficPeer { return &matcher.TrafficPeer{IP: ip} }
	aTrain, aEval, bTrain := pod(nsA, "train"), pod(nsA, "eval"), pod(nsB, "train")
	other := &matcher.TrafficPeer{IP: podIP(), Internal: &matcher.InternalPeer{Namespace: metav1.NamespaceDefault,
		NamespaceLabels: nsLabels[metav1.NamespaceDefault], PodLabels: map[string]string{"app": "web"}}}

	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	cases := map[string]struct {
		from, to *matcher.TrafficPeer
		port     int
		proto    corev1.Protocol
		want     bool
	}{
		"a job's pods reach each other (rendezvous)":            {from: aTrain, to: aTrain, port: 29500, proto: tcp, want: true},
		"a job's pods reach each other (MPI ssh)":               {from: bTrain, to: bTrain, port: 22, proto: tcp, want: true},
		"not the same tenant's other job":                       {from: aTrain, to: aEval, port: 29500, proto: tcp},
		"not another tenant's job of the same name":             {from: bTrain, to: aTrain, port: 29500, proto: tcp},
		"nor the other way":                                     {from: aTrain, to: bTrain, port: 22, proto: tcp},
		"DNS over UDP":                                          {from: bTrain, to: dns, port: 53, proto: udp, want: true},
		"DNS over TCP":                                          {from: aEval, to: dns, port: 53, proto: tcp, want: true},
		"nothing else in kube-system":                           {from: aTrain, to: dns, port: 443, proto: tcp},
		"no pod outside the tenants reaches a job":              {from: other, to: aTrain, port: 29500, proto: tcp},
		"a job reaches no pod outside the tenants":              {from: aTrain, to: other, port: 80, proto: tcp},
		"the Target's egress allowance":                         {from: aEval, to: outside("10.20.3.4"), port: 443, proto: tcp, want: true},
		"only on its port":                                      {from: aEval, to: outside("10.20.3.4"), port: 80, proto: tcp},
		"not in its exception":                                  {from: aEval, to: outside("10.20.9.9"), port: 443, proto: tcp},
		"not beyond its block":                                  {from: aEval, to: outside("10.30.0.1"), port: 443, proto: tcp},
		"a tenant without an allowance reaches nothing outside": {from: bTrain, to: outside("10.20.3.4"), port: 443, proto: tcp},
		"nothing outside reaches a job":                         {from: outside("10.20.3.4"), to: aEval, port: 29500, proto: tcp},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := engine.IsTrafficAllowed(&matcher.Traffic{Source: tc.from, Destination: tc.to, ResolvedPort: tc.port, Protocol: tc.proto})
			if got.IsAllowed() != tc.want {
				t.Errorf("allowed = %v, want %v\n%s", got.IsAllowed(), tc.want, got.Table())
			}
		})
	}
}

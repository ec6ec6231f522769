package tenancy

import (
	"context"
	"fmt"

	"github.com/mattfenwick/cyclonus/pkg/matcher"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetapi "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/test/util"
)

// spokeNetwork is every NetworkPolicy on the spoke, as a network plugin
// that implements them evaluates them: cyclonus's policy engine, which
// SIG Network's conformance tooling uses. The harness's kwok pods carry
// no traffic, so this is where the harness can show who may reach whom.
type spokeNetwork struct {
	policy     *matcher.Policy
	namespaces map[string]map[string]string
	ips        int
}

func readSpokeNetwork(g Gomega) *spokeNetwork {
	ctx := context.Background()
	var policies networkingv1.NetworkPolicyList
	g.Expect(spoke.Client.List(ctx, &policies)).To(Succeed())
	ptrs := make([]*networkingv1.NetworkPolicy, len(policies.Items))
	for i := range policies.Items {
		ptrs[i] = &policies.Items[i]
	}
	var nss corev1.NamespaceList
	g.Expect(spoke.Client.List(ctx, &nss)).To(Succeed())
	n := &spokeNetwork{policy: matcher.BuildNetworkPolicies(false, ptrs), namespaces: map[string]map[string]string{}}
	for _, ns := range nss.Items {
		n.namespaces[ns.Name] = ns.Labels
	}
	return n
}

// peer is a pod on the spoke, or an address outside it (pod nil). A pod
// without an address of its own gets one in 10.244.0.0/16, away from every
// block the test allows.
func (n *spokeNetwork) peer(g Gomega, pod *corev1.Pod, ip string) *matcher.TrafficPeer {
	if pod == nil {
		return &matcher.TrafficPeer{IP: ip}
	}
	if ip == "" {
		ip = pod.Status.PodIP
	}
	if ip == "" {
		n.ips++
		ip = fmt.Sprintf("10.244.%d.%d", n.ips/250, n.ips%250+1)
	}
	labels, ok := n.namespaces[pod.Namespace]
	g.Expect(ok).To(BeTrue(), "namespace %s of pod %s", pod.Namespace, pod.Name)
	return &matcher.TrafficPeer{IP: ip, Internal: &matcher.InternalPeer{
		Namespace: pod.Namespace, NamespaceLabels: labels, PodLabels: pod.Labels}}
}

// allows reports whether from may open a connection to to on port.
func (n *spokeNetwork) allows(from, to *matcher.TrafficPeer, port int, proto corev1.Protocol) bool {
	return n.policy.IsTrafficAllowed(&matcher.Traffic{Source: from, Destination: to, ResolvedPort: port, Protocol: proto}).IsAllowed()
}

// podsOf waits for the spoke's pods of js: at least want of them.
func podsOf(g Gomega, js *jobsetapi.JobSet, want int) []corev1.Pod {
	var pods corev1.PodList
	g.Eventually(func(g Gomega) {
		g.Expect(spoke.Client.List(context.Background(), &pods, client.InNamespace(js.Namespace),
			client.MatchingLabels{jobsetapi.JobSetNameKey: js.Name})).To(Succeed())
		g.Expect(len(pods.Items)).To(BeNumerically(">=", want), "pods of JobSet %s/%s", js.Namespace, js.Name)
	}, util.Timeout, util.Interval).Should(Succeed())
	return pods.Items
}

// expectTenantTraffic checks, between the pods of two tenants' jobs, that
// a job's pods reach each other on its rendezvous and SSH ports, that no
// pod reaches the other tenant's pods or an address outside the cluster,
// and that each reaches DNS in kube-system and nothing else there.
func expectTenantTraffic(g Gomega, jsA, jsB *jobsetapi.JobSet) {
	podsA, podsB := podsOf(g, jsA, 2), podsOf(g, jsB, 2)
	n := readSpokeNetwork(g)
	dns := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: metav1.NamespaceSystem,
		Labels: map[string]string{"k8s-app": "kube-dns"}}}
	jobPorts := []int{22, 29500}
	name := func(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }
	for _, pair := range []struct {
		own, other []corev1.Pod
	}{{podsA, podsB}, {podsB, podsA}} {
		for i := range pair.own {
			src := &pair.own[i]
			from := n.peer(g, src, "")
			for j := range pair.own {
				if i == j {
					continue
				}
				dst := &pair.own[j]
				for _, port := range jobPorts {
					g.Expect(n.allows(from, n.peer(g, dst, ""), port, corev1.ProtocolTCP)).To(BeTrue(),
						"%s -> %s:%d (same job) is refused", name(src), name(dst), port)
				}
			}
			for j := range pair.other {
				dst := &pair.other[j]
				for _, port := range jobPorts {
					g.Expect(n.allows(from, n.peer(g, dst, ""), port, corev1.ProtocolTCP)).To(BeFalse(),
						"%s -> %s:%d (another tenant's job) is allowed", name(src), name(dst), port)
					g.Expect(n.allows(n.peer(g, dst, ""), from, port, corev1.ProtocolTCP)).To(BeFalse(),
						"%s -> %s:%d (another tenant's job) is allowed", name(dst), name(src), port)
				}
			}
			g.Expect(n.allows(from, n.peer(g, dns, ""), 53, corev1.ProtocolUDP)).To(BeTrue(), "%s -> DNS is refused", name(src))
			g.Expect(n.allows(from, n.peer(g, dns, ""), 443, corev1.ProtocolTCP)).To(BeFalse(), "%s -> kube-system:443 is allowed", name(src))
			g.Expect(n.allows(from, n.peer(g, nil, "10.20.0.1"), 443, corev1.ProtocolTCP)).To(BeFalse(),
				"%s -> 10.20.0.1:443 (outside, not allowed by the Target) is allowed", name(src))
		}
	}
}

package kubework

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
)

// Tenancy: every hub namespace (a tenant) runs its jobs in a spoke
// namespace of its own, TenantNamespace(prefix, hub namespace), which the
// agent makes with Pod Security labels, a default-deny NetworkPolicy, a
// DNS exception and the Target's egress allowance. Each job adds a NetworkPolicy of its own (JobNetworkPolicy)
// that lets its pods reach each other and nothing else.
const (
	// DefaultNamespacePrefix is the Target API's default spec.kubernetes.namespace.
	DefaultNamespacePrefix = "trainyard-jobs"
	// PolicyDefaultDeny and PolicyAllowDNS are the NetworkPolicies of every
	// tenant namespace.
	PolicyDefaultDeny = "trainyard-default-deny"
	PolicyAllowDNS    = "trainyard-allow-dns"
	// PolicyAllowEgress holds the Target's egress allowance (EgressPolicy).
	PolicyAllowEgress = "trainyard-allow-egress"

	podSecurityEnforce        = "pod-security.kubernetes.io/enforce"
	podSecurityEnforceVersion = "pod-security.kubernetes.io/enforce-version"
	podSecurityWarn           = "pod-security.kubernetes.io/warn"
	podSecurityAudit          = "pod-security.kubernetes.io/audit"
	tenantHashLen             = 10
)

// TenantNamespace is the spoke namespace of hub namespace tenant:
// <prefix>-<tenant> when that is a DNS label of at most 63 characters,
// else the prefix, as much of tenant as fits and a hash of tenant, so two
// tenants never share one. It always starts with "<prefix>-" (the Target
// API bounds the prefix to 40 characters).
func TenantNamespace(prefix, tenant string) string {
	if prefix == "" {
		prefix = DefaultNamespacePrefix
	}
	name := prefix + "-" + tenant
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(tenant))
	suffix := "-" + hex.EncodeToString(sum[:])[:tenantHashLen]
	keep := max(63-len(prefix)-1-len(suffix), 0)
	return strings.TrimRight(prefix+"-"+tenant[:keep], "-") + suffix
}

// IsTenantNamespace reports whether ns is one of prefix's tenant
// namespaces, or the single namespace of agents before tenancy (prefix
// itself), whose work is still found and fenced after an upgrade.
func IsTenantNamespace(prefix, ns string) bool {
	if prefix == "" {
		prefix = DefaultNamespacePrefix
	}
	return ns == prefix || strings.HasPrefix(ns, prefix+"-")
}

// NamespaceOf is the spoke namespace of d's remote work: the one the agent
// recorded in d's status once it made it (so work made before an upgrade
// is still found), else its tenant's.
func NamespaceOf(prefix string, d *v1alpha1.Dispatch) string {
	if r := d.Status.Remote; r != nil && r.Namespace != "" {
		return r.Namespace
	}
	return TenantNamespace(prefix, d.Spec.Workload.Namespace)
}

// PodSecurityLabel is the Pod Security admission level of l ("baseline"
// when unset).
func PodSecurityLabel(l v1alpha1.PodSecurityLevel) string {
	switch l {
	case v1alpha1.PodSecurityRestricted:
		return "restricted"
	case v1alpha1.PodSecurityPrivileged:
		return "privileged"
	default:
		return "baseline"
	}
}

// TenantNamespaceObject is the namespace of tenant as the agent makes it:
// labelled with the tenant, and enforcing level (warning and auditing at
// restricted, so an administrator sees what a stricter level would refuse).
func TenantNamespaceObject(name, tenant string, level v1alpha1.PodSecurityLevel) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		v1alpha1.LabelTenant:      v1alpha1.LabelValue(tenant),
		backends.LabelManagedBy:   backends.ManagedByValue,
		podSecurityEnforce:        PodSecurityLabel(level),
		podSecurityEnforceVersion: "latest",
		podSecurityWarn:           "restricted",
		podSecurityAudit:          "restricted",
	}}}
}

// TenantNetworkPolicies are the NetworkPolicies of every tenant namespace:
// all ingress and egress denied, except DNS (port 53 to kube-system) and
// the Target's egress allowance (EgressPolicy).
func TenantNetworkPolicies(ns string, egress []v1alpha1.EgressRule) []*networkingv1.NetworkPolicy {
	labels := map[string]string{backends.LabelManagedBy: backends.ManagedByValue}
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	dns := intstr.FromInt32(53)
	return []*networkingv1.NetworkPolicy{
		{
			ObjectMeta: metav1.ObjectMeta{Name: PolicyDefaultDeny, Namespace: ns, Labels: labels},
			Spec: networkingv1.NetworkPolicySpec{
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: PolicyAllowDNS, Namespace: ns, Labels: labels},
			Spec: networkingv1.NetworkPolicySpec{
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
				Egress: []networkingv1.NetworkPolicyEgressRule{{
					To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{
						MatchLabels: map[string]string{corev1.LabelMetadataName: metav1.NamespaceSystem}}}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}},
				}},
			},
		},
		EgressPolicy(ns, egress),
	}
}

// EgressPolicy is the NetworkPolicy PolicyAllowEgress of a tenant
// namespace: every pod there may reach the Target's spec.kubernetes.
// networkPolicy.egress blocks, on their ports. With no rules it allows
// nothing, so it is always there and a Target change only updates it.
func EgressPolicy(ns string, egress []v1alpha1.EgressRule) *networkingv1.NetworkPolicy {
	p := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: PolicyAllowEgress, Namespace: ns,
			Labels: map[string]string{backends.LabelManagedBy: backends.ManagedByValue}},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}},
	}
	for _, r := range egress {
		rule := networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{
			IPBlock: &networkingv1.IPBlock{CIDR: r.CIDR, Except: slices.Clone(r.Except)}}}}
		for _, port := range r.Ports {
			proto := corev1.Protocol(port.Protocol)
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			num := intstr.FromInt32(port.Port)
			rule.Ports = append(rule.Ports, networkingv1.NetworkPolicyPort{Protocol: &proto, Port: &num, EndPort: port.EndPort})
		}
		p.Spec.Egress = append(p.Spec.Egress, rule)
	}
	return p
}

// JobNetworkPolicy lets the pods of one job (those labelled key=value:
// jobset.sigs.k8s.io/jobset-name or leaderworkerset.sigs.k8s.io/name) reach
// each other, on any port, and nothing else beyond the namespace's DNS
// exception. The backend creates it as a companion owned by the job.
func JobNetworkPolicy(ns, name, key, value string) *networkingv1.NetworkPolicy {
	peers := []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{key: value}}}}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-peers", Namespace: ns},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{key: value}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: peers}},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{To: peers}},
		},
	}
}

// RoleBindingName is the RoleBinding that gives the agent its rights in a
// tenant namespace (see TenantBinding).
const RoleBindingName = "trainyard-agent"

// TenantBinding lets an agent hold its write rights only in the tenant
// namespaces it made: it binds ClusterRole (the chart's <release>-tenant,
// which the agent may bind and nothing more) to Subject, itself, in each
// one, before it creates anything there.
type TenantBinding struct {
	ClusterRole string
	Subject     rbacv1.Subject
}

// Namespaces makes tenant namespaces ready once per process, and again
// after Update: created when missing, their Pod Security labels set to the
// Target's level, the agent's RoleBinding (with a Binding) and the
// NetworkPolicies created, the egress allowance kept as the Target says. A
// restarted agent checks each again on its first job there, so a crash
// between these steps is mended.
type Namespaces struct {
	Prefix string
	Level  v1alpha1.PodSecurityLevel
	// Egress is the Target's spec.kubernetes.networkPolicy.egress.
	Egress []v1alpha1.EgressRule
	// Binding, when set, is bound in every tenant namespace.
	Binding *TenantBinding
	// Reader reads live (nil: the client).
	Reader client.Reader
	// Status, when set, gives every tenant namespace what its trainer pods
	// need to reach the agent's status endpoint.
	Status *StatusAccess

	mu    sync.Mutex
	ready map[string]bool
}

// Update applies a changed Target's level and egress allowance: each
// namespace is checked again at its next job. It reports whether anything
// changed.
func (n *Namespaces) Update(level v1alpha1.PodSecurityLevel, egress []v1alpha1.EgressRule) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.Level == level && equality.Semantic.DeepEqual(n.Egress, egress) {
		return false
	}
	n.Level, n.Egress, n.ready = level, slices.Clone(egress), nil
	return true
}

// Ensure makes the namespace of d's new remote work ready and returns it.
func (n *Namespaces) Ensure(ctx context.Context, c client.Client, d *v1alpha1.Dispatch) (string, error) {
	ns := NamespaceOf(n.Prefix, d)
	n.mu.Lock()
	done, level, egress := n.ready[ns], n.Level, n.Egress
	n.mu.Unlock()
	if done || ns == n.Prefix {
		// The pre-tenancy namespace is the administrator's, as it was.
		return ns, nil
	}
	if err := n.ensure(ctx, c, ns, d.Spec.Workload.Namespace, level, egress); err != nil {
		return "", err
	}
	n.mu.Lock()
	if n.ready == nil {
		n.ready = map[string]bool{}
	}
	// Unless an Update came in meanwhile: then check again next time.
	if n.Level == level && equality.Semantic.DeepEqual(n.Egress, egress) {
		n.ready[ns] = true
	}
	n.mu.Unlock()
	return ns, nil
}

// Forget makes the next Ensure of ns check it again: CreateRemote found it
// gone (ErrNamespaceGone).
func (n *Namespaces) Forget(ns string) {
	n.mu.Lock()
	delete(n.ready, ns)
	n.mu.Unlock()
}

func (n *Namespaces) ensure(ctx context.Context, c client.Client, ns, tenant string, level v1alpha1.PodSecurityLevel, egress []v1alpha1.EgressRule) error {
	reader := n.Reader
	if reader == nil {
		reader = c
	}
	want := TenantNamespaceObject(ns, tenant, level)
	var have corev1.Namespace
	err := reader.Get(ctx, client.ObjectKey{Name: ns}, &have)
	switch {
	case apierrors.IsNotFound(err):
		if err := c.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create namespace %s: %w", ns, err)
		}
	case err != nil:
		return fmt.Errorf("get namespace %s: %w", ns, err)
	case have.Labels[podSecurityEnforce] != want.Labels[podSecurityEnforce] || have.Labels[v1alpha1.LabelTenant] != want.Labels[v1alpha1.LabelTenant]:
		patch := client.MergeFrom(have.DeepCopy())
		if have.Labels == nil {
			have.Labels = map[string]string{}
		}
		for k, v := range want.Labels {
			have.Labels[k] = v
		}
		if err := c.Patch(ctx, &have, patch); err != nil {
			return fmt.Errorf("label namespace %s: %w", ns, err)
		}
	}
	if n.Binding != nil {
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: RoleBindingName, Namespace: ns,
				Labels: map[string]string{backends.LabelManagedBy: backends.ManagedByValue}},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: n.Binding.ClusterRole},
			Subjects: []rbacv1.Subject{n.Binding.Subject},
		}
		if err := c.Create(ctx, rb); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("bind %s in namespace %s: %w", n.Binding.ClusterRole, ns, err)
		}
	}
	for _, p := range TenantNetworkPolicies(ns, egress) {
		if err := ensurePolicy(ctx, c, reader, p); err != nil {
			return err
		}
	}
	if n.Status != nil {
		return ensureStatusAccess(ctx, c, reader, n.Status, ns)
	}
	return nil
}

// ensurePolicy creates p, or brings the egress allowance, which follows the
// Target, back to p's spec. The other policies are never changed: an
// administrator's edit of them stays.
func ensurePolicy(ctx context.Context, c client.Client, reader client.Reader, p *networkingv1.NetworkPolicy) error {
	err := c.Create(ctx, p)
	if err == nil || !apierrors.IsAlreadyExists(err) || p.Name != PolicyAllowEgress {
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create networkpolicy %s/%s: %w", p.Namespace, p.Name, err)
		}
		return nil
	}
	var have networkingv1.NetworkPolicy
	if err := reader.Get(ctx, client.ObjectKeyFromObject(p), &have); err != nil {
		return fmt.Errorf("get networkpolicy %s/%s: %w", p.Namespace, p.Name, err)
	}
	if equality.Semantic.DeepEqual(have.Spec, p.Spec) {
		return nil
	}
	have.Spec = p.Spec
	if err := c.Update(ctx, &have); err != nil {
		return fmt.Errorf("update networkpolicy %s/%s to the target's egress allowance: %w", p.Namespace, p.Name, err)
	}
	return nil
}

package charts

import (
	"context"
	"fmt"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	jobsetapi "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/jobset"
	"github.com/trainyard-dev/trainyard/backends/kubework"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/hub/tenantview"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/spoke"
	"github.com/trainyard-dev/trainyard/test/util"
)

// needsCRDs are rendered kinds whose CRDs (cert-manager, Prometheus
// Operator) the test API server does not have.
var needsCRDs = map[string]bool{"Certificate": true, "Issuer": true, "ServiceMonitor": true}

// TestChartsOnAPIServer installs both rendered charts, hub and a
// Kubernetes agent, into one real API server (the spoke is the hub
// cluster), with strict field validation. The agent's JobSet backend then
// runs Capacity, Submit (which makes the tenant namespace and binds the
// chart's tenant role there), Observe, ListRemote and Cancel as the chart's
// ServiceAccount, so the spoke RBAC is proven sufficient, and writes outside
// the tenant namespaces are refused, so it is proven narrow.
func TestChartsOnAPIServer(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := kube.Start(ctx, kube.Options{Name: "charts", CRDs: []string{kube.CRDsJobSet}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Stop() }()
	g.Expect(c.EnsureNamespace(ctx, releaseNS)).To(Succeed())

	hub := hubRelease().render(t)
	install(ctx, t, c, hub)
	for _, crd := range hub.ofKind("CustomResourceDefinition") {
		g.Eventually(func(g Gomega) {
			var got apiextensionsv1.CustomResourceDefinition
			g.Expect(c.Client.Get(ctx, client.ObjectKey{Name: crd.GetName()}, &got)).To(Succeed())
			g.Expect(established(&got)).To(BeTrue(), "CRD %s not Established", got.Name)
		}, util.Timeout, util.Interval).Should(Succeed())
	}
	hubSA := "system:serviceaccount:" + releaseNS + ":trainyard-hub"
	for _, ra := range []struct {
		attrs authzv1.ResourceAttributes
		want  bool
	}{
		{authzv1.ResourceAttributes{Group: v1alpha1.GroupVersion.Group, Resource: "dispatches", Verb: "create", Namespace: "trainyard-spoke1"}, true},
		// Leader election writes its Lease in the release namespace only; the
		// agents' Leases everywhere are read, never written.
		{authzv1.ResourceAttributes{Group: "coordination.k8s.io", Resource: "leases", Verb: "update", Namespace: releaseNS}, true},
		{authzv1.ResourceAttributes{Group: "coordination.k8s.io", Resource: "leases", Verb: "update", Namespace: "trainyard-spoke1"}, false},
		{authzv1.ResourceAttributes{Group: "coordination.k8s.io", Resource: "leases", Verb: "create", Namespace: "team-a"}, false},
		{authzv1.ResourceAttributes{Group: "coordination.k8s.io", Resource: "leases", Verb: "watch"}, true},
		{authzv1.ResourceAttributes{Resource: "secrets", Verb: "get", Namespace: releaseNS}, false},
		// ConfigMaps it deletes only in agent namespaces, under the Role
		// of hub/targets.AgentRBAC there, none of which this test applies.
		{authzv1.ResourceAttributes{Resource: "configmaps", Verb: "delete", Namespace: "team-a"}, false},
		{authzv1.ResourceAttributes{Resource: "configmaps", Verb: "delete", Namespace: "kube-system"}, false},
		// The hub runs Kueue's TrainJob integration (hub/kueuejob), which
		// creates TrainJobs' Workloads and deletes stale ones, as Kueue does.
		{authzv1.ResourceAttributes{Group: "kueue.x-k8s.io", Resource: "workloads", Verb: "delete", Namespace: "team-a"}, true},
		{authzv1.ResourceAttributes{Group: "kueue.x-k8s.io", Resource: "clusterqueues", Verb: "update"}, false},
		// The admission policies come with the chart; the hub only reads the requester one.
		{authzv1.ResourceAttributes{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies", Verb: "get", Name: tenantview.RequesterPolicyName}, true},
		{authzv1.ResourceAttributes{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies", Verb: "create"}, false},
		{authzv1.ResourceAttributes{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies", Verb: "update", Name: tenantview.RequesterPolicyName}, false},
		{authzv1.ResourceAttributes{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicybindings", Verb: "update", Name: tenantview.RequesterPolicyName}, false},
	} {
		expectAccess(ctx, g, c, hubSA, []string{"system:serviceaccounts"}, ra.attrs, ra.want)
	}
	checkTenantRole(ctx, t, c)

	install(ctx, t, c, agentRelease().render(t))
	agentUser := "system:serviceaccount:" + releaseNS + ":trainyard-agent-spoke1"
	cfg, err := c.AddUser(agentUser,
		"system:serviceaccounts", "system:serviceaccounts:"+releaseNS, "system:authenticated")
	g.Expect(err).NotTo(HaveOccurred())
	// The spoke side of the agent as spoke/kubernetes.go builds it: a
	// cluster-wide cache, a JobSet informer for remote events.
	cl, err := cluster.New(cfg, func(o *cluster.Options) { o.Scheme = spoke.SpokeScheme() })
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = cl.Start(ctx) }()
	g.Expect(cl.GetCache().WaitForCacheSync(ctx)).To(BeTrue(), "the agent's spoke cache did not start")
	_, err = cl.GetCache().GetInformer(ctx, &jobsetapi.JobSet{})
	g.Expect(err).NotTo(HaveOccurred(), "the agent cannot watch JobSets")
	// The binding spoke/kubernetes.go makes of --spoke-tenant-role.
	binding := &kubework.TenantBinding{ClusterRole: "trainyard-agent-spoke1-tenant",
		Subject: rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: agentUser}}
	b := jobset.New(cl.GetClient(), jobset.Options{Namespace: jobsNS, Binding: binding, LiveReader: cl.GetAPIReader()})
	// A read the RBAC forbids never syncs its informer: bound each call.
	call := func() context.Context {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		t.Cleanup(cancel)
		return cctx
	}

	_, err = b.Capacity(call())
	g.Expect(err).NotTo(HaveOccurred(), "Capacity as the agent")
	tj := tytesting.MakeTrainJob("train-rbac", "team-a").Queue("lq").Suspend(true).NumNodes(1).Obj()
	d := tytesting.MakeDispatch("rbac", "trainyard-spoke1", "spoke1").SnapshotTrainJob(tj).
		SnapshotRuntime(v1alpha1.RuntimeKindClusterTrainingRuntime, "torch-distributed", tytesting.TorchRuntimeSpec(1)).
		PodSets(v1alpha1.PodSetPlacement{Name: "node", Count: 1}).Obj()
	// The RoleBinding it makes takes effect once the API server's
	// authorizer has seen it: Submit is retried as the agent would.
	var ref *v1alpha1.RemoteRef
	g.Eventually(func() error {
		ref, err = b.Submit(call(), d)
		return err
	}, util.Timeout, util.Interval).Should(Succeed(), "Submit as the agent")
	tenantNS := kubework.TenantNamespace(jobsNS, "team-a")
	g.Expect(ref.Namespace).To(Equal(tenantNS))
	_, err = b.Observe(call(), d)
	g.Expect(err).NotTo(HaveOccurred(), "Observe as the agent")
	g.Eventually(func(g Gomega) {
		work, err := b.ListRemote(call())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(work).To(HaveLen(1))
	}, util.Timeout, util.Interval).Should(Succeed())
	_, err = b.Cancel(call(), d)
	g.Expect(err).NotTo(HaveOccurred(), "Cancel as the agent")
	// A Target change reaches the namespace at the next job, as the agent.
	egress := []v1alpha1.EgressRule{{CIDR: "10.20.0.0/16", Ports: []v1alpha1.EgressPort{{Protocol: v1alpha1.EgressProtocolTCP, Port: 443}}}}
	b.UpdateSettings(kubework.Settings{Egress: egress})
	d2 := tytesting.MakeDispatch("rbac-2", "trainyard-spoke1", "spoke1").SnapshotTrainJob(tj).
		SnapshotRuntime(v1alpha1.RuntimeKindClusterTrainingRuntime, "torch-distributed", tytesting.TorchRuntimeSpec(1)).
		PodSets(v1alpha1.PodSetPlacement{Name: "node", Count: 1}).Attempt(2).Obj()
	_, err = b.Submit(call(), d2)
	g.Expect(err).NotTo(HaveOccurred(), "Submit as the agent after the Target's egress changed")
	var allow networkingv1.NetworkPolicy
	g.Expect(c.Client.Get(ctx, client.ObjectKey{Namespace: tenantNS, Name: kubework.PolicyAllowEgress}, &allow)).To(Succeed())
	g.Expect(allow.Spec.Egress).To(HaveLen(1))
	g.Expect(allow.Spec.Egress[0].To[0].IPBlock.CIDR).To(Equal("10.20.0.0/16"))

	direct, err := client.New(cfg, client.Options{Scheme: spoke.SpokeScheme()})
	g.Expect(err).NotTo(HaveOccurred())
	checkStatusAPIAccess(ctx, t, c, cl, direct, binding, tj)
	outside := &jobsetapi.JobSet{ObjectMeta: metav1.ObjectMeta{Name: "outside", Namespace: "default"}}
	bind := func(ns, role string) *rbacv1.RoleBinding {
		return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "agent-" + role, Namespace: ns},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}, Subjects: []rbacv1.Subject{binding.Subject}}
	}
	relabel := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default", Labels: map[string]string{v1alpha1.LabelTenant: "x"}}}
	for what, err := range map[string]error{
		"create a JobSet in default":           direct.Create(ctx, outside),
		"list Secrets":                         direct.List(ctx, &corev1.SecretList{}),
		"label a Namespace it did not make":    direct.Patch(ctx, relabel, client.Merge),
		"delete a Node":                        direct.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}),
		"bind another role in its namespace":   direct.Create(ctx, bind(tenantNS, "cluster-admin")),
		"bind its tenant role outside tenants": direct.Create(ctx, bind("default", binding.ClusterRole)),
	} {
		// The admission policy answers Invalid, RBAC Forbidden.
		g.Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "the agent may %s: %v", what, err)
	}
	checkTenantNamespacePolicy(ctx, t, direct)
	// Its RoleBinding, namespace labels and NetworkPolicies are where they belong.
	var ns corev1.Namespace
	g.Expect(c.Client.Get(ctx, client.ObjectKey{Name: tenantNS}, &ns)).To(Succeed())
	g.Expect(ns.Labels).To(HaveKeyWithValue("pod-security.kubernetes.io/enforce", "baseline"))
	var np networkingv1.NetworkPolicy
	g.Expect(c.Client.Get(ctx, client.ObjectKey{Namespace: tenantNS, Name: kubework.PolicyDefaultDeny}, &np)).To(Succeed())
}

// checkStatusAPIAccess: as the chart's agent, with the status API on (the
// chart's default), Submit gives the tenant namespace the CA ConfigMap and
// the egress exception and brings the ConfigMap to a new CA; the agent may
// review tokens and label the pods of its namespace, and no other.
func checkStatusAPIAccess(ctx context.Context, t *testing.T, c *kube.Cluster, cl cluster.Cluster, direct client.Client,
	binding *kubework.TenantBinding, tj *trainer.TrainJob) {
	t.Helper()
	g := NewWithT(t)
	access := &kubework.StatusAccess{Endpoint: kubework.StatusEndpoint{BaseURL: "https://trainyard-agent-spoke1-status.trainyard-system.svc:9443",
		CAConfigMap: spoke.DefaultStatusCAConfigMap}, CA: []byte("ca-1"), AgentNamespace: releaseNS,
		AgentLabels: map[string]string{"app.kubernetes.io/name": "trainyard-agent"}, Port: 9443}
	tenantNS := kubework.TenantNamespace(jobsNS, "team-a")
	for attempt, ca := range map[int32]string{3: "ca-1", 4: "ca-2"} {
		access.CA = []byte(ca)
		b := jobset.New(cl.GetClient(), jobset.Options{Namespace: jobsNS, Binding: binding, LiveReader: cl.GetAPIReader(), Status: access})
		d := tytesting.MakeDispatch(fmt.Sprintf("status-%d", attempt), "trainyard-spoke1", "spoke1").SnapshotTrainJob(tj).
			SnapshotRuntime(v1alpha1.RuntimeKindClusterTrainingRuntime, "torch-distributed", tytesting.TorchRuntimeSpec(1)).
			PodSets(v1alpha1.PodSetPlacement{Name: "node", Count: 1}).Attempt(attempt).Obj()
		_, err := b.Submit(ctx, d)
		g.Expect(err).NotTo(HaveOccurred(), "Submit with the status API as the agent (CA %s)", ca)
		var cm corev1.ConfigMap
		g.Expect(c.Client.Get(ctx, client.ObjectKey{Namespace: tenantNS, Name: spoke.DefaultStatusCAConfigMap}, &cm)).To(Succeed())
		g.Expect(cm.Data["ca.crt"]).To(Equal(ca))
	}
	var np networkingv1.NetworkPolicy
	g.Expect(c.Client.Get(ctx, client.ObjectKey{Namespace: tenantNS, Name: kubework.PolicyAllowStatus}, &np)).To(Succeed())

	review := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: "not-a-token", Audiences: []string{"trainer.kubeflow.org/x"}}}
	g.Expect(direct.Create(ctx, review)).To(Succeed(), "the agent may not review tokens")
	g.Expect(review.Status.Authenticated).To(BeFalse())
	for _, ns := range []string{releaseNS, "team-a"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent-pod", Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "agent"}}}}
		g.Expect(c.Client.Create(ctx, pod)).To(Succeed())
		err := direct.Patch(ctx, pod, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+spoke.LabelStatusLeader+`":"true"}}}`)))
		if ns == releaseNS {
			g.Expect(err).NotTo(HaveOccurred(), "the agent may not label its pod")
		} else {
			g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the agent may label pods in %s: %v", ns, err)
		}
	}
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "tenant-config", Namespace: tenantNS}, Data: map[string]string{"a": "b"}}
	g.Expect(c.Client.Create(ctx, other)).To(Succeed())
	other.Data["a"] = "changed"
	g.Expect(apierrors.IsForbidden(direct.Update(ctx, other))).To(BeTrue(), "the agent may update a tenant's ConfigMaps")
}

// install creates every object the API server knows the kind of, CRDs
// first, refusing unknown fields.
func install(ctx context.Context, t *testing.T, c *kube.Cluster, objs objects) {
	t.Helper()
	crdsFirst := append(objs.ofKind("CustomResourceDefinition"), objects{}...)
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			crdsFirst = append(crdsFirst, o)
		}
	}
	for _, o := range crdsFirst {
		if needsCRDs[o.GetKind()] {
			continue
		}
		if err := c.Client.Create(ctx, o.DeepCopy(), client.FieldValidation("Strict")); err != nil {
			t.Fatalf("create %s: %v", key(o), err)
		}
	}
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, cond := range crd.Status.Conditions {
		if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

// checkTenantRole binds the chart's tenant role to a user in team-a, as
// config/samples/30-tenants.yaml does, and asks the API server what the
// user may do: its TrainJobs, their Workloads and LogRequests in team-a;
// nothing in team-b, and no Dispatch anywhere.
func checkTenantRole(ctx context.Context, t *testing.T, c *kube.Cluster) {
	g := NewWithT(t)
	g.Expect(c.EnsureNamespace(ctx, "team-a")).To(Succeed())
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: "team-a"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: tenantRole},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "team-a"}}}
	g.Expect(c.Client.Create(ctx, rb)).To(Succeed())
	group := v1alpha1.GroupVersion.Group
	for _, ra := range []struct {
		attrs authzv1.ResourceAttributes
		want  bool
	}{
		{authzv1.ResourceAttributes{Group: "trainer.kubeflow.org", Resource: "trainjobs", Verb: "create", Namespace: "team-a"}, true},
		{authzv1.ResourceAttributes{Group: "trainer.kubeflow.org", Resource: "trainjobs", Subresource: "log", Verb: "get", Namespace: "team-a"}, true},
		{authzv1.ResourceAttributes{Group: "kueue.x-k8s.io", Resource: "workloads", Verb: "list", Namespace: "team-a"}, true},
		{authzv1.ResourceAttributes{Group: group, Resource: "logrequests", Verb: "create", Namespace: "team-a"}, true},
		{authzv1.ResourceAttributes{Group: group, Resource: "logrequests", Verb: "update", Namespace: "team-a"}, false},
		// Output only through LogRequests it made, read back by name.
		{authzv1.ResourceAttributes{Group: group, Resource: "logrequests", Verb: "list", Namespace: "team-a"}, false},
		{authzv1.ResourceAttributes{Group: group, Resource: "logrequests", Verb: "create", Namespace: "team-b"}, false},
		{authzv1.ResourceAttributes{Group: "trainer.kubeflow.org", Resource: "trainjobs", Verb: "get", Namespace: "team-b"}, false},
		{authzv1.ResourceAttributes{Group: group, Resource: "dispatches", Verb: "get", Namespace: "team-a"}, false},
		{authzv1.ResourceAttributes{Group: group, Resource: "dispatches", Verb: "list", Namespace: "trainyard-spoke1"}, false},
		{authzv1.ResourceAttributes{Group: "kueue.x-k8s.io", Resource: "workloads", Verb: "update", Namespace: "team-a"}, false},
	} {
		expectAccess(ctx, g, c, "alice", []string{"team-a", "system:authenticated"}, ra.attrs, ra.want)
	}
}

// expectAccess asks the API server whether user (in groups) may do attrs.
// The authorizer sees new bindings through its informer, a moment after
// their create: an allowed case is awaited. Each list of cases starts with
// an allowed one, so the refusals after it are judged once the bindings
// are seen.
func expectAccess(ctx context.Context, g Gomega, c *kube.Cluster, user string, groups []string, attrs authzv1.ResourceAttributes, want bool) {
	allowed := func(g Gomega) bool {
		sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &attrs}}
		g.Expect(c.Client.Create(ctx, sar)).To(Succeed())
		return sar.Status.Allowed
	}
	msg := fmt.Sprintf("%s may %s %s/%s %s in %q", user, attrs.Verb, attrs.Resource, attrs.Subresource, attrs.Name, attrs.Namespace)
	if want {
		g.Eventually(allowed, util.Timeout, util.Interval).Should(BeTrue(), msg)
		return
	}
	g.Expect(allowed(g)).To(BeFalse(), msg)
}

// checkTenantNamespacePolicy: the agent, which makes tenant namespaces
// itself, cannot make one the chart's -tenant-namespaces policy does not
// allow: outside its prefix, privileged, without a Pod Security level or
// pinned to an old one, or carrying a label or annotation it never sets.
// Each is refused by the policy (its message), not by RBAC.
func checkTenantNamespacePolicy(ctx context.Context, t *testing.T, agent client.Client) {
	g := NewWithT(t)
	nsWith := func(name string, edit func(l, a map[string]string)) *corev1.Namespace {
		ns := kubework.TenantNamespaceObject(name, "team-x", v1alpha1.PodSecurityBaseline)
		ns.Annotations = map[string]string{}
		edit(ns.Labels, ns.Annotations)
		return ns
	}
	const psa = "pod-security.kubernetes.io/"
	for what, ns := range map[string]*corev1.Namespace{
		"outside its prefix":             nsWith("team-x", func(map[string]string, map[string]string) {}),
		"privileged":                     nsWith(jobsNS+"-priv", func(l, _ map[string]string) { l[psa+"enforce"] = "privileged" }),
		"with no level":                  nsWith(jobsNS+"-nolevel", func(l, _ map[string]string) { delete(l, psa+"enforce") }),
		"pinned to an old level version": nsWith(jobsNS+"-old", func(l, _ map[string]string) { l[psa+"enforce-version"] = "v1.22" }),
		"untenanted":                     nsWith(jobsNS+"-untenanted", func(l, _ map[string]string) { delete(l, v1alpha1.LabelTenant) }),
		"with a label others select by":  nsWith(jobsNS+"-selected", func(l, _ map[string]string) { l["monitoring"] = "scrape-all" }),
		"with an annotation": nsWith(jobsNS+"-annotated", func(_, a map[string]string) {
			a["scheduler.alpha.kubernetes.io/node-selector"] = "node-role.kubernetes.io/control-plane="
		}),
	} {
		err := agent.Create(ctx, ns)
		g.Expect(err).To(HaveOccurred(), "the agent makes a namespace %s", what)
		g.Expect(err.Error()).To(ContainSubstring("the trainyard agent"), "namespace %s refused, but not by the policy: %v", what, err)
	}
	// The same, as the agent makes it, passes.
	ok := nsWith(jobsNS+"-team-x", func(map[string]string, map[string]string) {})
	ok.Annotations = nil
	g.Expect(agent.Create(ctx, ok)).To(Succeed(), "the agent makes a tenant namespace as kubework does")
}

package tenancy

import (
	"context"
	"path/filepath"
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetapi "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/hub/snapshot"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// asTenant is a hub client acting as user, in group (the tenant's
// namespace), with only the rights the shipped tenant role gives there:
// the harness installs config/rbac/tenant, this binds it as
// config/samples/30-tenants.yaml does.
func asTenant(t *testing.T, user, group string) client.Client {
	t.Helper()
	g := NewWithT(t)
	root, err := kube.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	bindings, err := util.ReadManifests(filepath.Join(root, "config", "samples", "30-tenants.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	for _, b := range bindings {
		g.Expect(b.GetKind()).To(Equal("RoleBinding"), "the sample tenant RBAC holds only bindings of the shipped role")
		g.Expect(client.IgnoreAlreadyExists(fleet.Hub.Client.Create(context.Background(), b))).To(Succeed())
	}
	cfg := rest.CopyConfig(fleet.Hub.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{group, "system:authenticated"}}
	c, err := client.New(cfg, client.Options{Scheme: fleet.Hub.Client.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	return c
}

// TestHostileTenantOnTheHub: alice (team-a) submits a job with the shipped
// tenant role and nothing else; bob (team-b), with the same role in his
// namespace, tries to read her job and its Dispatch, to release her quota
// by relabelling the Dispatch, to ask for her logs and to pre-set a runtime
// pin. Each attempt is refused with a reason, and her job completes; her
// own log request is answered, bob's is denied by the relay itself once
// RBAC lets him ask, and the token in her job's environment is
// in nothing the hub or the agent logged.
func TestHostileTenantOnTheHub(t *testing.T) {
	ctx, g := context.Background(), NewWithT(t)
	torch := shipped(t, "torch-distributed")
	alice, bob := asTenant(t, "alice", tenantA), asTenant(t, "bob", tenantB)

	tj := tytesting.MakeTrainJob("alice-job", tenantA).Queue(queue).
		RuntimeRef(trainer.ClusterTrainingRuntimeKind, torch.Name).NumNodes(1).GPUsPerNode(1).Obj()
	// A token in her job's environment, which nothing may log.
	tj.Spec.Trainer.Env = []corev1.EnvVar{{Name: "HF_TOKEN", Value: secretCanary}}
	g.Expect(alice.Create(ctx, tj)).To(Succeed(), "alice submits with the tenant role")
	t.Cleanup(func() { _ = fleet.Hub.Client.Delete(ctx, tj) })

	var d v1alpha1.Dispatch
	g.Eventually(func(g Gomega) {
		var ds v1alpha1.DispatchList
		g.Expect(fleet.Hub.Client.List(ctx, &ds, client.MatchingLabels{v1alpha1.LabelWorkloadNamespace: tenantA})).To(Succeed())
		var mine []v1alpha1.Dispatch
		for _, x := range ds.Items {
			if x.Spec.Workload.Namespace == tenantA && x.Spec.TrainJob.Name == tj.Name {
				mine = append(mine, x)
			}
		}
		g.Expect(mine).To(HaveLen(1))
		d = mine[0]
	}, util.Timeout, util.Interval).Should(Succeed())

	// alice reads what describe and jobs need in her namespace.
	g.Expect(alice.Get(ctx, client.ObjectKeyFromObject(tj), &trainer.TrainJob{})).To(Succeed())
	g.Expect(alice.List(ctx, &kueue.WorkloadList{}, client.InNamespace(tenantA))).To(Succeed())
	// ... but not the Dispatch, which is for administrators.
	g.Expect(apierrors.IsForbidden(alice.Get(ctx, client.ObjectKeyFromObject(&d), &v1alpha1.Dispatch{}))).To(BeTrue())

	forbidden := map[string]error{
		"read alice's TrainJob":        bob.Get(ctx, client.ObjectKeyFromObject(tj), &trainer.TrainJob{}),
		"list team-a's Workloads":      bob.List(ctx, &kueue.WorkloadList{}, client.InNamespace(tenantA)),
		"read alice's Dispatch":        bob.Get(ctx, client.ObjectKeyFromObject(&d), &v1alpha1.Dispatch{}),
		"list Dispatches":              bob.List(ctx, &v1alpha1.DispatchList{}),
		"list Dispatches of his agent": bob.List(ctx, &v1alpha1.DispatchList{}, client.InNamespace(d.Namespace)),
		"relabel alice's Dispatch": bob.Patch(ctx, &v1alpha1.Dispatch{ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: d.Namespace}},
			client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"`+v1alpha1.LabelWorkloadUID+`":"released"}}}`))),
		"ask for alice's logs": bob.Create(ctx, &v1alpha1.LogRequest{ObjectMeta: metav1.ObjectMeta{GenerateName: "peek-", Namespace: tenantA},
			Spec: v1alpha1.LogRequestSpec{TrainJobName: tj.Name, Requester: v1alpha1.Requester{Username: "bob", Groups: []string{tenantB}}}}),
		"suspend alice's job": bob.Patch(ctx, &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: tj.Name, Namespace: tenantA}},
			client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"suspend":true}}`))),
	}
	for what, err := range forbidden {
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "bob may %s: %v", what, err)
	}

	// A runtime pin of his own choosing, in his own namespace: refused.
	pinned := tytesting.MakeTrainJob("preset-pin", tenantB).Queue(queue).
		RuntimeRef(trainer.ClusterTrainingRuntimeKind, torch.Name).NumNodes(1).GPUsPerNode(1).Obj()
	pinned.Annotations = map[string]string{"trainyard.dev/runtime-source": "ClusterTrainingRuntime/" + torch.Name}
	err := bob.Create(ctx, pinned)
	g.Expect(err).To(HaveOccurred(), "bob pre-sets the pin annotation")
	g.Expect(err.Error()).To(ContainSubstring(snapshot.ErrPresetPin.Error()))

	// alice's job completes, its Dispatch untouched.
	g.Eventually(func(g Gomega) {
		c := condition(g, tj, trainer.TrainJobComplete)
		g.Expect(c).NotTo(BeNil(), "TrainJob %s: conditions %v", tj.Name, tj.Status.Conditions)
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
	}, util.Timeout, util.Interval).Should(Succeed())
	var after v1alpha1.Dispatch
	g.Expect(fleet.Hub.Client.Get(ctx, client.ObjectKeyFromObject(&d), &after)).To(Succeed())
	g.Expect(after.Labels[v1alpha1.LabelWorkloadUID]).To(Equal(d.Labels[v1alpha1.LabelWorkloadUID]))
	g.Expect(string(after.Spec.TrainJob.Spec.Raw)).To(ContainSubstring(secretCanary),
		"the Dispatch carries the token, so the check below would see it logged")

	// alice asks for her logs, through the relay and the agent, and gets
	// what her job printed.
	g.Eventually(func(g Gomega) {
		sets := jobSetsOf(g, tj)
		g.Expect(sets).To(HaveLen(1))
		_, err := spoke.SetPodLogs(ctx, nsA, map[string]string{jobsetapi.JobSetNameKey: sets[0].Name}, "node", "alice's epoch 1 loss 0.42")
		g.Expect(err).NotTo(HaveOccurred())
	}, util.Timeout, util.Interval).Should(Succeed())
	lr := &v1alpha1.LogRequest{ObjectMeta: metav1.ObjectMeta{GenerateName: "mine-", Namespace: tenantA},
		Spec: v1alpha1.LogRequestSpec{TrainJobName: tj.Name, Requester: v1alpha1.Requester{Username: "alice", Groups: []string{tenantA, "system:authenticated"}}}}
	g.Expect(alice.Create(ctx, lr)).To(Succeed(), "alice asks for her logs")
	g.Eventually(func(g Gomega) {
		g.Expect(alice.Get(ctx, client.ObjectKeyFromObject(lr), lr)).To(Succeed())
		g.Expect(lr.Status.Phase.IsFinal()).To(BeTrue(), "LogRequest %+v", lr.Status)
	}, util.Timeout, util.Interval).Should(Succeed())
	g.Expect(lr.Status.Phase).To(Equal(v1alpha1.LogRequestAnswered), "alice's own LogRequest: %s", lr.Status.Message)
	g.Expect(lr.Status.Log).To(ContainSubstring("alice's epoch 1 loss 0.42"))

	// bob, granted LogRequests in team-a by a careless administrator, gets
	// past RBAC; the relay's own check (may he get her job, and its
	// trainjobs/log?) still refuses him, and relays nothing to the agent.
	grantLogRequests(t, "bob", tenantA)
	peek := &v1alpha1.LogRequest{ObjectMeta: metav1.ObjectMeta{GenerateName: "peek-", Namespace: tenantA},
		Spec: v1alpha1.LogRequestSpec{TrainJobName: tj.Name, Requester: v1alpha1.Requester{Username: "bob", Groups: []string{tenantB, "system:authenticated"}}}}
	g.Eventually(func() error { return bob.Create(ctx, peek) }, util.Timeout, util.Interval).Should(Succeed(),
		"bob creates a LogRequest in team-a once granted")
	t.Cleanup(func() { _ = fleet.Hub.Client.Delete(ctx, peek) })
	g.Eventually(func(g Gomega) {
		g.Expect(fleet.Hub.Client.Get(ctx, client.ObjectKeyFromObject(peek), peek)).To(Succeed())
		g.Expect(peek.Status.Phase.IsFinal()).To(BeTrue(), "LogRequest %+v", peek.Status)
	}, util.Timeout, util.Interval).Should(Succeed())
	g.Expect(peek.Status.Phase).To(Equal(v1alpha1.LogRequestDenied), "bob's LogRequest for alice's job: %+v", peek.Status)
	g.Expect(peek.Status.Message).To(ContainSubstring(`user "bob" may not get trainjobs`))
	g.Expect(peek.Status.Log).To(BeEmpty())
	g.Expect(peek.Status.RelayedAt).To(BeNil(), "the relay passed bob's request to the agent")

	// Everything the hub and the agent logged about her job, its dispatch,
	// bob's attempts and her LogRequest: the token is in none of it.
	logged := controllerLog.String()
	g.Expect(logged).To(ContainSubstring(d.Name), "the log capture saw nothing of the job")
	g.Expect(logged).NotTo(ContainSubstring(secretCanary), "a tenant's token reached the controllers' log")
}

// grantLogRequests binds user, in namespace, to a Role that lets them
// create and read LogRequests there and nothing else: RBAC no longer
// stands between them and the relay.
func grantLogRequests(t *testing.T, user, namespace string) {
	t.Helper()
	ctx, g := context.Background(), NewWithT(t)
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "logrequests-" + user, Namespace: namespace},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"logrequests"},
			Verbs: []string{"create", "get"}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: namespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
	for _, o := range []client.Object{role, binding} {
		g.Expect(client.IgnoreAlreadyExists(fleet.Hub.Client.Create(ctx, o))).To(Succeed())
		t.Cleanup(func() { _ = fleet.Hub.Client.Delete(ctx, o) })
	}
}

// secretCanary is a token value only a job's environment holds.
const secretCanary = "hf_canary_9f3c1e7d5b2a4068"

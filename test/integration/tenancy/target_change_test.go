package tenancy

import (
	"context"
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/kubework"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// withCapability is a team-b job on torch-distributed whose runtime patch
// adds a Linux capability Pod Security baseline allows but the Target's
// allowedPodFields must list.
func withCapability(name string, torch *trainer.ClusterTrainingRuntime) *trainer.TrainJob {
	tj := tytesting.MakeTrainJob(name, tenantB).Queue(queue).
		RuntimeRef(trainer.ClusterTrainingRuntimeKind, torch.Name).NumNodes(1).GPUsPerNode(1).Obj()
	sc := &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_CHROOT"}}}
	patch := trainer.TrainingRuntimeSpecPatch{Template: &trainer.JobSetTemplatePatch{Spec: &trainer.JobSetSpecPatch{
		ReplicatedJobs: []trainer.ReplicatedJobPatch{{Name: "node", Template: &trainer.JobTemplatePatch{
			Spec: &trainer.JobSpecPatch{Template: &trainer.PodTemplatePatch{Spec: &trainer.PodSpecPatch{
				Containers: []trainer.ContainerPatch{{Name: "node", SecurityContext: sc}}}}}}}}}}}
	tj.Spec.RuntimePatches = []trainer.RuntimePatch{{Manager: "team-b.example.com/tools", TrainingRuntimeSpec: &patch}}
	return tj
}

// TestTargetChangeAppliesWithoutRestart: the administrator allows a
// capability and an egress block on the running spoke's Target. The agent,
// never restarted, renders the next job with the new allowlist (a job its
// old allowlist refused now completes) and gives team-b's namespace the new
// egress allowance; taking them back applies again.
func TestTargetChangeAppliesWithoutRestart(t *testing.T) {
	ctx, g := context.Background(), NewWithT(t)
	torch := shipped(t, "torch-distributed")
	key := client.ObjectKey{Name: spoke.Name}
	setTarget := func(allowed *v1alpha1.AllowedPodFields, np *v1alpha1.TenantNetworkPolicy) {
		t.Helper()
		g.Eventually(func() error {
			var tg v1alpha1.Target
			if err := fleet.Hub.Client.Get(ctx, key, &tg); err != nil {
				return err
			}
			tg.Spec.Kubernetes.AllowedPodFields, tg.Spec.Kubernetes.NetworkPolicy = allowed, np
			return fleet.Hub.Client.Update(ctx, &tg)
		}, util.Timeout, util.Interval).Should(Succeed())
	}
	var before v1alpha1.Target
	g.Expect(fleet.Hub.Client.Get(ctx, key, &before)).To(Succeed())
	t.Cleanup(func() { setTarget(before.Spec.Kubernetes.AllowedPodFields, before.Spec.Kubernetes.NetworkPolicy) })

	refused := submit(t, withCapability("cap-refused", torch))
	g.Eventually(func(g Gomega) {
		c := condition(g, refused, trainer.TrainJobFailed)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Message).To(ContainSubstring("capability SYS_CHROOT is not allowed on this target"))
	}, util.Timeout, util.Interval).Should(Succeed())

	allowed := &v1alpha1.AllowedPodFields{Capabilities: []string{"SYS_CHROOT"}}
	if a := before.Spec.Kubernetes.AllowedPodFields; a != nil {
		allowed = a.DeepCopy()
		allowed.Capabilities = append(allowed.Capabilities, "SYS_CHROOT")
	}
	store := []v1alpha1.EgressRule{{CIDR: "198.51.100.0/24", Ports: []v1alpha1.EgressPort{{Port: 443}}}}
	setTarget(allowed, &v1alpha1.TenantNetworkPolicy{Egress: store})

	// The namespace's egress allowance, made at team-b's next job, shows the
	// agent has the new spec; the job the old allowlist refused then runs.
	probe := submit(t, tytesting.MakeTrainJob("probe-egress", tenantB).Queue(queue).
		RuntimeRef(trainer.ClusterTrainingRuntimeKind, torch.Name).NumNodes(1).GPUsPerNode(1).Obj())
	egressOf := func(g Gomega) []networkingv1.NetworkPolicyEgressRule {
		var np networkingv1.NetworkPolicy
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Namespace: nsB, Name: kubework.PolicyAllowEgress}, &np)).To(Succeed())
		return np.Spec.Egress
	}
	g.Eventually(func(g Gomega) {
		g.Expect(jobSetsOf(g, probe)).To(HaveLen(1))
		rules := egressOf(g)
		g.Expect(rules).To(HaveLen(1))
		g.Expect(rules[0].To[0].IPBlock.CIDR).To(Equal("198.51.100.0/24"))
		g.Expect(rules[0].Ports[0].Port.IntValue()).To(Equal(443))
	}, util.Timeout, util.Interval).Should(Succeed())

	ran := submit(t, withCapability("cap-allowed", torch))
	g.Eventually(func(g Gomega) {
		c := condition(g, ran, trainer.TrainJobComplete)
		g.Expect(c).NotTo(BeNil(), "TrainJob %s: conditions %v", ran.Name, ran.Status.Conditions)
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
	}, util.Timeout, util.Interval).Should(Succeed())
	g.Expect(jobSetsOf(g, ran)).To(HaveLen(1))

	// Taken back: the next job of team-b finds the allowance empty again.
	setTarget(before.Spec.Kubernetes.AllowedPodFields, nil)
	again := submit(t, tytesting.MakeTrainJob("probe-no-egress", tenantB).Queue(queue).
		RuntimeRef(trainer.ClusterTrainingRuntimeKind, torch.Name).NumNodes(1).GPUsPerNode(1).Obj())
	g.Eventually(func(g Gomega) {
		g.Expect(jobSetsOf(g, again)).To(HaveLen(1))
		g.Expect(egressOf(g)).To(BeEmpty())
	}, util.Timeout, util.Interval).Should(Succeed())
}

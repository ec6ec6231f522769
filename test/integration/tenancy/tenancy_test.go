package tenancy

import (
	"context"
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetapi "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/kubework"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// shipped creates Kubeflow's runtime of that name on the hub, unchanged.
func shipped(t *testing.T, name string) *trainer.ClusterTrainingRuntime {
	t.Helper()
	all, err := tytesting.AllShippedRuntimes()
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	for _, rt := range all {
		if rt.Name != name {
			continue
		}
		ctx := context.Background()
		err := fleet.Hub.Client.Create(ctx, rt.DeepCopy())
		NewWithT(t).Expect(client.IgnoreAlreadyExists(err)).To(Succeed())
		return rt
	}
	t.Fatalf("Kubeflow ships no runtime %q", name)
	return nil
}

func submit(t *testing.T, tj *trainer.TrainJob) *trainer.TrainJob {
	t.Helper()
	ctx := context.Background()
	util.CreateTrainJob(NewWithT(t), fleet.Hub.Client, tj)
	t.Cleanup(func() { _ = fleet.Hub.Client.Delete(ctx, tj) })
	return tj
}

// jobSetsOf lists the spoke's JobSets made for a TrainJob, in any namespace.
func jobSetsOf(g Gomega, tj *trainer.TrainJob) []jobsetapi.JobSet {
	var list jobsetapi.JobSetList
	g.Expect(spoke.Client.List(context.Background(), &list,
		client.MatchingLabels{v1alpha1.LabelTrainJobUID: string(tj.UID)})).To(Succeed())
	return list.Items
}

func condition(g Gomega, tj *trainer.TrainJob, typ string) *metav1.Condition {
	g.Expect(fleet.Hub.Client.Get(context.Background(), client.ObjectKeyFromObject(tj), tj)).To(Succeed())
	return apimeta.FindStatusCondition(tj.Status.Conditions, typ)
}

// TestTenantsAreIsolatedOnOneSpoke: team-a runs an MPI job on Kubeflow's
// deepspeed-distributed and team-b a torch job on torch-distributed, both
// as shipped, on one spoke. Each lands in its own namespace, which enforces
// Pod Security baseline and denies all traffic but DNS and the job's own
// (the Target allows no further egress);
// team-b's runtime patches that reach for the host, another identity or
// team-a's SSH keys are refused on the hub, and team-a's job completes.
func TestTenantsAreIsolatedOnOneSpoke(t *testing.T) {
	ctx, g := context.Background(), NewWithT(t)
	mpi, torch := shipped(t, "deepspeed-distributed"), shipped(t, "torch-distributed")
	a := submit(t, tytesting.MakeTrainJob("mpi", tenantA).Queue(queue).
		RuntimeRef(trainer.ClusterTrainingRuntimeKind, mpi.Name).NumNodes(2).GPUsPerNode(1).Obj())
	b := submit(t, tytesting.MakeTrainJob("torch", tenantB).Queue(queue).
		RuntimeRef(trainer.ClusterTrainingRuntimeKind, torch.Name).NumNodes(2).GPUsPerNode(1).Obj())

	// Each tenant's JobSet is in its own namespace.
	var jsA, jsB jobsetapi.JobSet
	g.Eventually(func(g Gomega) {
		as, bs := jobSetsOf(g, a), jobSetsOf(g, b)
		g.Expect(as).To(HaveLen(1))
		g.Expect(bs).To(HaveLen(1))
		jsA, jsB = as[0], bs[0]
	}, util.Timeout, util.Interval).Should(Succeed())
	g.Expect(jsA.Namespace).To(Equal(nsA))
	g.Expect(jsB.Namespace).To(Equal(nsB))

	for ns, tenant := range map[string]string{nsA: tenantA, nsB: tenantB} {
		var n corev1.Namespace
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: ns}, &n)).To(Succeed())
		g.Expect(n.Labels).To(HaveKeyWithValue("pod-security.kubernetes.io/enforce", "baseline"))
		g.Expect(n.Labels).To(HaveKeyWithValue("pod-security.kubernetes.io/warn", "restricted"))
		g.Expect(n.Labels).To(HaveKeyWithValue(v1alpha1.LabelTenant, tenant))
		var deny networkingv1.NetworkPolicy
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: kubework.PolicyDefaultDeny}, &deny)).To(Succeed())
		g.Expect(deny.Spec.PodSelector.MatchLabels).To(BeEmpty(), "the default deny selects every pod")
		g.Expect(deny.Spec.PolicyTypes).To(ConsistOf(networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress))
		g.Expect(deny.Spec.Ingress).To(BeEmpty())
		g.Expect(deny.Spec.Egress).To(BeEmpty())
		var dns networkingv1.NetworkPolicy
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: kubework.PolicyAllowDNS}, &dns)).To(Succeed())
		g.Expect(dns.Spec.Egress).To(HaveLen(1))
		g.Expect(dns.Spec.Egress[0].Ports).To(HaveLen(2))
		// The Target allows no further egress.
		var allow networkingv1.NetworkPolicy
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: kubework.PolicyAllowEgress}, &allow)).To(Succeed())
		g.Expect(allow.Spec.PolicyTypes).To(ConsistOf(networkingv1.PolicyTypeEgress))
		g.Expect(allow.Spec.Egress).To(BeEmpty())
	}
	// Each job's pods may reach each other, through a policy owned by its JobSet.
	for _, js := range []jobsetapi.JobSet{jsA, jsB} {
		var peers networkingv1.NetworkPolicy
		g.Eventually(func() error {
			return spoke.Client.Get(ctx, client.ObjectKey{Namespace: js.Namespace, Name: js.Name + "-peers"}, &peers)
		}, util.Timeout, util.Interval).Should(Succeed())
		sel := map[string]string{jobsetapi.JobSetNameKey: js.Name}
		g.Expect(peers.Spec.PodSelector.MatchLabels).To(Equal(sel))
		g.Expect(peers.Spec.Ingress[0].From[0].PodSelector.MatchLabels).To(Equal(sel))
		g.Expect(peers.Spec.Egress[0].To[0].PodSelector.MatchLabels).To(Equal(sel))
		g.Expect(metav1.IsControlledBy(&peers, &js)).To(BeTrue(), "owners %v", peers.OwnerReferences)
	}
	// What those policies let through, pod by pod.
	expectTenantTraffic(g, &jsA, &jsB)

	// team-a's SSH keys exist, in team-a's namespace only, owned by its JobSet.
	keysName := jsA.Name + "-mpi-ssh-auth"
	var keys corev1.Secret
	g.Eventually(func() error {
		return spoke.Client.Get(ctx, client.ObjectKey{Namespace: nsA, Name: keysName}, &keys)
	}, util.Timeout, util.Interval).Should(Succeed())
	g.Expect(metav1.IsControlledBy(&keys, &jsA)).To(BeTrue())

	// The spoke's API server enforces the namespace's level: a privileged
	// pod made there by anyone is refused.
	priv := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "priv", Namespace: nsB}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "c", Image: "busybox", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}}}
	err := spoke.Client.Create(ctx, priv)
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "create a privileged pod in %s: %v", nsB, err)
	g.Expect(err.Error()).To(ContainSubstring("violates PodSecurity \"baseline:latest\""))

	refusals := map[string]struct {
		patch trainer.PodSpecPatch
		want  string
	}{
		"hostpath": {
			patch: trainer.PodSpecPatch{Volumes: []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: "/var/run"}}}}},
			want: `volume "host" of type hostPath is not allowed on this target`,
		},
		"privileged": {
			patch: trainer.PodSpecPatch{Containers: []trainer.ContainerPatch{{Name: "node",
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}},
			want: `container "node": privileged is not allowed on this target`,
		},
		"identity": {
			patch: trainer.PodSpecPatch{ServiceAccountName: ptr.To("trainyard-agent")},
			want:  `serviceAccountName "trainyard-agent" is not allowed on this target`,
		},
		"keys": {
			patch: trainer.PodSpecPatch{Volumes: []corev1.Volume{{Name: "stolen", VolumeSource: corev1.VolumeSource{
				Secret: &corev1.SecretVolumeSource{SecretName: keysName}}}}},
			want: `volume "stolen" mounts Secret "` + keysName + `", which was not made for this job`,
		},
	}
	var refused []*trainer.TrainJob
	wants := map[*trainer.TrainJob]string{}
	for name, tc := range refusals {
		tj := tytesting.MakeTrainJob("bad-"+name, tenantB).Queue(queue).
			RuntimeRef(trainer.ClusterTrainingRuntimeKind, torch.Name).NumNodes(1).GPUsPerNode(1).Obj()
		patch := trainer.TrainingRuntimeSpecPatch{Template: &trainer.JobSetTemplatePatch{Spec: &trainer.JobSetSpecPatch{
			ReplicatedJobs: []trainer.ReplicatedJobPatch{{Name: "node", Template: &trainer.JobTemplatePatch{
				Spec: &trainer.JobSpecPatch{Template: &trainer.PodTemplatePatch{Spec: &tc.patch}}}}}}}}
		tj.Spec.RuntimePatches = []trainer.RuntimePatch{{Manager: "team-b.example.com/tools", TrainingRuntimeSpec: &patch}}
		tj = submit(t, tj)
		refused = append(refused, tj)
		wants[tj] = tc.want
	}
	for _, tj := range refused {
		g.Eventually(func(g Gomega) {
			c := condition(g, tj, trainer.TrainJobFailed)
			g.Expect(c).NotTo(BeNil(), "TrainJob %s is not Failed", tj.Name)
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonDispatchRejected))
			g.Expect(c.Message).To(ContainSubstring(wants[tj]))
		}, util.Timeout, util.Interval).Should(Succeed())
		g.Expect(jobSetsOf(g, tj)).To(BeEmpty(), "TrainJob %s reached the spoke", tj.Name)
	}

	// Both good jobs finish, team-a's untouched by team-b's attempts.
	for _, tj := range []*trainer.TrainJob{a, b} {
		g.Eventually(func(g Gomega) {
			c := condition(g, tj, trainer.TrainJobComplete)
			g.Expect(c).NotTo(BeNil(), "TrainJob %s: conditions %v", tj.Name, tj.Status.Conditions)
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		}, util.Timeout, util.Interval).Should(Succeed())
	}
	g.Expect(spoke.Client.Get(ctx, client.ObjectKeyFromObject(&keys), &keys)).To(Succeed())
	g.Expect(jobSetsOf(g, a)).To(HaveLen(1))
}

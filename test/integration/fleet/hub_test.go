package fleet

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueuetesting "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"

	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// setupQueues creates a flavor, a ClusterQueue with gpus of quota and a
// LocalQueue in a fresh namespace, and returns the namespace.
func setupQueues(t *testing.T, prefix, gpus string) string {
	t.Helper()
	ctx, c := context.Background(), fleet.Hub.Client
	g := NewWithT(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	g.Expect(c.Create(ctx, ns)).To(Succeed())
	flavor := kueuetesting.MakeResourceFlavor(ns.Name + "-gpu").Obj()
	cq := kueuetesting.MakeClusterQueue(ns.Name + "-cq").
		ResourceGroup(*kueuetesting.MakeFlavorQuotas(flavor.Name).Resource("nvidia.com/gpu", gpus).Obj()).Obj()
	lq := kueuetesting.MakeLocalQueue("lq", ns.Name).ClusterQueue(cq.Name).Obj()
	for _, o := range []client.Object{flavor, cq, lq} {
		g.Expect(c.Create(ctx, o)).To(Succeed())
	}
	t.Cleanup(func() {
		for _, o := range []client.Object{lq, cq, flavor} {
			_ = c.Delete(ctx, o)
		}
	})
	g.Eventually(func() error {
		return util.ConditionTrue(ctx, c, cq, func() []metav1.Condition { return cq.Status.Conditions }, kueue.ClusterQueueActive)
	}, util.Timeout, util.Interval).Should(Succeed())
	return ns.Name
}

// TestHubKueueAdmitsWorkload: a Workload within quota is admitted, and one
// beyond what is left stays pending: the real Kueue enforces the quota.
func TestHubKueueAdmitsWorkload(t *testing.T) {
	ctx, c := context.Background(), fleet.Hub.Client
	g := NewWithT(t)
	ns := setupQueues(t, "admit", "8")

	first := kueuetesting.MakeWorkload("first", ns).Queue("lq").
		PodSets(*kueuetesting.MakePodSet("node", 2).Request("nvidia.com/gpu", "4").Obj()).Obj()
	g.Expect(c.Create(ctx, first)).To(Succeed())
	g.Eventually(func() error {
		return util.ConditionTrue(ctx, c, first, func() []metav1.Condition { return first.Status.Conditions }, kueue.WorkloadAdmitted)
	}, util.Timeout, util.Interval).Should(Succeed())
	g.Expect(first.Status.Admission).NotTo(BeNil())
	g.Expect(first.Status.Admission.PodSetAssignments).To(HaveLen(1))
	g.Expect(string(first.Status.Admission.PodSetAssignments[0].Flavors["nvidia.com/gpu"])).To(Equal(ns + "-gpu"))

	second := kueuetesting.MakeWorkload("second", ns).Queue("lq").
		PodSets(*kueuetesting.MakePodSet("node", 1).Request("nvidia.com/gpu", "4").Obj()).Obj()
	g.Expect(c.Create(ctx, second)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(second), second)).To(Succeed())
		cond := apimeta.FindStatusCondition(second.Status.Conditions, kueue.WorkloadQuotaReserved)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(cond.Reason).To(Equal("Pending"))
	}, util.Timeout, util.Interval).Should(Succeed())
}

// TestHubKueueLeavesTrainJobsToTrainyard: the hub's Kueue runs with its
// built-in TrainJob integration off and TrainJob listed as an external
// framework, as trainyard's hub serves that integration itself on the
// pinned runtime (hub/kueuejob). Without trainyard, Kueue neither suspends
// a queued TrainJob nor makes it a Workload; were the built-in integration
// on, it would make a second Workload beside trainyard's, from the live
// runtime.
func TestHubKueueLeavesTrainJobsToTrainyard(t *testing.T) {
	ctx, c := context.Background(), fleet.Hub.Client
	g := NewWithT(t)
	ns := setupQueues(t, "trainjob", "16")
	rt := tytesting.MakeClusterTrainingRuntime("torch-distributed").Obj()
	if err := c.Create(ctx, rt); err != nil {
		g.Expect(client.IgnoreAlreadyExists(err)).To(Succeed())
	}
	tj := tytesting.MakeTrainJob("llama", ns).Queue("lq").NumNodes(2).GPUsPerNode(4).Obj()
	g.Expect(c.Create(ctx, tj)).To(Succeed())
	g.Expect(ptr.Deref(tj.Spec.Suspend, false)).To(BeFalse(), "Kueue's own TrainJob webhook suspended the TrainJob")
	g.Consistently(func(g Gomega) {
		var list kueue.WorkloadList
		g.Expect(c.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		g.Expect(list.Items).To(BeEmpty(), "Kueue made a Workload for a TrainJob")
	}, 5*time.Second, util.Interval).Should(Succeed())
}

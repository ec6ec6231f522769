package lws

import (
	"context"
	"strings"
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	lwsapi "sigs.k8s.io/lws/api/leaderworkerset/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/lws"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// setsOf lists the agent's LeaderWorkerSets made for TrainJob name (remote
// names start with it).
func setsOf(g Gomega, name string) []lwsapi.LeaderWorkerSet {
	var list lwsapi.LeaderWorkerSetList
	g.Expect(spoke.Client.List(context.Background(), &list, client.InNamespace(agentJobsNS))).To(Succeed())
	var out []lwsapi.LeaderWorkerSet
	for _, s := range list.Items {
		if strings.HasPrefix(s.Name, name+"-") {
			out = append(out, s)
		}
	}
	return out
}

// TestTrainJobRunsAsLeaderWorkerSet: a TrainJob admitted by the hub's Kueue
// is dispatched to the LeaderWorkerSet target, runs there as one group and
// completes on the hub; deleting it removes the set from the spoke.
func TestTrainJobRunsAsLeaderWorkerSet(t *testing.T) {
	ctx, g, hub := context.Background(), NewWithT(t), fleet.Hub.Client
	rt := tytesting.MakeClusterTrainingRuntime("torch-lws").Toleration(kube.KwokToleration).
		PodAnnotation("kwok.trainyard.dev/run-for", "4s").Obj()
	g.Expect(hub.Create(ctx, rt)).To(Succeed())
	t.Cleanup(func() { _ = hub.Delete(ctx, rt) })
	tj := tytesting.MakeTrainJob("llama", tenant).Queue(queue).
		RuntimeRef(trainer.ClusterTrainingRuntimeKind, rt.Name).NumNodes(2).GPUsPerNode(gpusPerNode).Obj()
	g.Expect(hub.Create(ctx, tj)).To(Succeed())

	g.Eventually(func(g Gomega) {
		sets := setsOf(g, tj.Name)
		g.Expect(sets).To(HaveLen(1))
		g.Expect(ptr.Deref(sets[0].Spec.LeaderWorkerTemplate.Size, 0)).To(Equal(int32(2)))
	}, util.Timeout, util.Interval).Should(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(hub.Get(ctx, client.ObjectKeyFromObject(tj), tj)).To(Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete)).To(BeTrue(), "conditions %v", tj.Status.Conditions)
	}, util.Timeout, util.Interval).Should(Succeed())

	var dispatches v1alpha1.DispatchList
	g.Expect(hub.List(ctx, &dispatches, client.MatchingLabels{v1alpha1.LabelTarget: spoke.Name})).To(Succeed())
	var mine []v1alpha1.Dispatch
	for _, d := range dispatches.Items {
		if d.Spec.TrainJob.Name == tj.Name {
			mine = append(mine, d)
		}
	}
	g.Expect(mine).To(HaveLen(1))
	g.Expect(mine[0].Status.Remote).NotTo(BeNil())
	g.Expect(mine[0].Status.Remote.Kind).To(Equal(lws.Kind))
	g.Expect(mine[0].Status.Reason).To(Equal(v1alpha1.ReasonLeaderSucceeded))
	sets := setsOf(g, tj.Name)
	g.Expect(sets).To(HaveLen(1))
	g.Expect(sets[0].Annotations).To(HaveKey(v1alpha1.AnnotationLeaderWorkerSetFinished))
	g.Expect(ptr.Deref(sets[0].Spec.Replicas, -1)).To(BeZero())

	g.Expect(hub.Delete(ctx, tj, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(setsOf(g, tj.Name)).To(BeEmpty())
	}, util.Timeout, util.Interval).Should(Succeed())
}

package dispatch

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobset "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

const rackLevel = "topology.kubernetes.io/rack"

// TestRequiredRackKeepsJobInOneRack: a 4-node job whose runtime requires
// one rack is placed inside one rack of a spoke, the assignment reaches the
// Dispatch, and its pods run only on that rack's nodes.
func TestRequiredRackKeepsJobInOneRack(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	rt := tytesting.MakeClusterTrainingRuntime("torch-rack").Toleration(kube.KwokToleration).
		PodAnnotation("kwok.trainyard.dev/run-for", "1h").
		PodAnnotation(v1alpha1.AnnotationPodSetRequiredTopology, rackLevel).Obj()
	g.Expect(env.fleet.Hub.Client.Create(ctx, rt)).To(Succeed())
	t.Cleanup(func() { _ = env.fleet.Hub.Client.Delete(ctx, rt) })
	// 4 pods of 2 GPUs: a rack (2 nodes of 4 GPUs) holds exactly one such job.
	tj := submit(t, trainJob("in-rack", "torch-rack", 4, 2))
	_, d := waitRunning(t, tj)

	ta := d.Spec.PodSets[0].Topology
	g.Expect(ta).NotTo(BeNil(), "no topology assignment on the Dispatch")
	g.Expect(ta.Levels).To(Equal([]string{rackLevel, corev1.LabelHostname}))
	racks := map[string]int32{}
	for _, dom := range ta.Domains {
		racks[dom.Values[0]] += dom.Count
	}
	g.Expect(racks).To(HaveLen(1), "assignment spans racks: %+v", ta.Domains)

	spoke := spokeNamed(d.Spec.TargetName)
	var pods corev1.PodList
	g.Eventually(func(g Gomega) {
		g.Expect(spoke.Client.List(ctx, &pods, client.InNamespace(spokeNS),
			client.MatchingLabels{jobset.JobSetNameKey: d.Status.Remote.Name})).To(Succeed())
		g.Expect(pods.Items).To(HaveLen(4))
		for _, p := range pods.Items {
			g.Expect(p.Spec.NodeName).NotTo(BeEmpty())
		}
	}, util.Timeout, util.Interval).Should(Succeed())
	ranOn := map[string]bool{}
	for _, p := range pods.Items {
		var n corev1.Node
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, &n)).To(Succeed())
		ranOn[n.Labels[rackLevel]] = true
	}
	g.Expect(ranOn).To(HaveLen(1), "pods ran in racks %v", ranOn)
	for rack := range racks {
		g.Expect(ranOn).To(HaveKey(rack))
	}
}

package dispatch

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/hub/dispatch"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// TestCordonedNodeKeepsARackJobWaiting: with one node of every rack
// cordoned, a job that needs a whole rack fits nowhere now but could once
// the nodes are back: it waits with its quota, never rejected as one that
// can never fit, and runs once they are uncordoned.
func TestCordonedNodeKeepsARackJobWaiting(t *testing.T) {
	g := NewWithT(t)
	ctx, c := context.Background(), env.fleet.Hub.Client
	// One node of each rack (rack-<i/2>) on every spoke.
	cordon := func(on bool) {
		for _, s := range env.fleet.Spokes {
			for i := 0; i < nodesPerSpoke; i += 2 {
				var n corev1.Node
				g.Expect(s.Client.Get(ctx, client.ObjectKey{Name: fmt.Sprintf("%s-gpu-%d", s.Name, i)}, &n)).To(Succeed())
				patch := client.MergeFrom(n.DeepCopy())
				n.Spec.Unschedulable = on
				g.Expect(s.Client.Patch(ctx, &n, patch)).To(Succeed())
			}
		}
	}
	cordon(true)
	uncordoned := false
	t.Cleanup(func() {
		if !uncordoned {
			cordon(false)
		}
	})
	// Every target reports its cordoned nodes, with nothing free on them.
	g.Eventually(func(g Gomega) {
		var list v1alpha1.TargetList
		g.Expect(c.List(ctx, &list)).To(Succeed())
		for _, tg := range list.Items {
			if tg.Spec.Kubernetes == nil {
				continue
			}
			g.Expect(tg.Status.MaxGPUsPerNode).To(Equal(int64(gpusPerNode)), "%s", tg.Name)
			g.Expect(tg.Status.Topology).NotTo(BeNil(), "%s", tg.Name)
			nodes := 0
			for _, d := range tg.Status.Topology.Domains {
				for i, name := range d.Nodes {
					nodes++
					if strings.HasSuffix(name, "-gpu-0") || strings.HasSuffix(name, "-gpu-2") {
						g.Expect(d.FreeGPUsPerNode[i]).To(BeZero(), "%s: cordoned %s", tg.Name, name)
					}
				}
			}
			g.Expect(nodes).To(Equal(nodesPerSpoke), "%s: cordoned nodes must stay in the topology", tg.Name)
		}
	}, util.Timeout, util.Interval).Should(Succeed())

	rt := tytesting.MakeClusterTrainingRuntime("torch-rack-cordon").Toleration(kube.KwokToleration).
		PodAnnotation("kwok.trainyard.dev/run-for", "1h").
		PodAnnotation(v1alpha1.AnnotationPodSetRequiredTopology, rackLevel).Obj()
	g.Expect(c.Create(ctx, rt)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(ctx, rt) })
	// 2 pods of 4 GPUs: a whole rack, which no rack has free now.
	tj := submit(t, trainJob("rack-cordon", "torch-rack-cordon", 2, gpusPerNode))
	waiting := func(g Gomega) {
		wl := util.WorkloadOf(g, c, tj)
		g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved)).To(BeTrue(), "holds quota")
		g.Expect(wl.Status.AdmissionChecks).To(ContainElement(And(
			HaveField("State", kueue.CheckStatePending),
			HaveField("Message", WithTransform(func(m string) bool { return strings.HasPrefix(m, dispatch.WaitingPrefix) }, BeTrue())),
		)), "the check waits for room")
		g.Expect(dispatchesOf(g, wl)).To(BeEmpty())
	}
	g.Eventually(waiting, util.Timeout, util.Interval).Should(Succeed())
	g.Consistently(waiting, 5*time.Second, util.Interval).Should(Succeed())

	cordon(false)
	uncordoned = true
	waitRunning(t, tj)
}

package dispatch

import (
	"context"
	"strings"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/hub/dispatch"
	"github.com/trainyard-dev/trainyard/test/util"
)

// TestJobsWaitingForRoomStartAsItFrees: with both spokes full, admitted
// jobs keep their quota and wait with the check Pending ("waiting for
// room"), never evicted into Kueue's back-off; when running jobs go, the
// freed room wakes them and they run.
func TestJobsWaitingForRoomStartAsItFrees(t *testing.T) {
	g := NewWithT(t)
	ctx, c := context.Background(), env.fleet.Hub.Client
	makeRuntime(t, "torch-wait", "10m")
	fillers := fillSpokes(t, "wait-fill", "torch-wait")
	waiters := []*trainer.TrainJob{
		submit(t, trainJob("wait-a", "torch-wait", 1, gpusPerNode)),
		submit(t, trainJob("wait-b", "torch-wait", 1, gpusPerNode)),
	}
	waiting := func(g Gomega) {
		for _, tj := range waiters {
			wl := util.WorkloadOf(g, c, tj)
			g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved)).To(BeTrue(), "%s holds quota", tj.Name)
			g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadEvicted)).To(BeFalse(), "%s evicted", tj.Name)
			g.Expect(wl.Status.AdmissionChecks).To(ContainElement(And(
				HaveField("State", kueue.CheckStatePending),
				HaveField("Message", WithTransform(func(m string) bool { return strings.HasPrefix(m, dispatch.WaitingPrefix) }, BeTrue())),
			)), "%s's check", tj.Name)
			g.Expect(dispatchesOf(g, wl)).To(BeEmpty())
		}
	}
	g.Eventually(waiting, util.Timeout, util.Interval).Should(Succeed())
	g.Consistently(waiting, 3*time.Second, util.Interval).Should(Succeed())

	for _, tj := range fillers[:2] {
		g.Expect(c.Delete(ctx, tj, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	}
	for _, tj := range waiters {
		waitRunning(t, tj)
	}
}

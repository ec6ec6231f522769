package dispatch

import (
	"context"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/dispatch"
	"github.com/trainyard-dev/trainyard/test/util"
)

// TestJobsWaitingForRoomStartAsItFrees: with both spokes full, admitted
// jobs keep their quota and are never evicted into Kueue's back-off. A job
// of several pods waits on the hub with the check Pending ("waiting for
// room"); jobs of one pod go to wait in the spokes' own queues (the JobSet
// made, its pod Pending; one a spoke by default, more while the hub's
// adaptive depth follows the burst of starts that filled them) so that the
// spoke's scheduler binds them the moment room frees. When the running jobs go, every one of them runs.
func TestJobsWaitingForRoomStartAsItFrees(t *testing.T) {
	g := NewWithT(t)
	ctx, c := context.Background(), env.fleet.Hub.Client
	makeRuntime(t, "torch-wait", "10m")
	fillers := fillSpokes(t, "wait-fill", "torch-wait")
	wide := submit(t, trainJob("wait-wide", "torch-wait", 2, gpusPerNode))
	narrow := []*trainer.TrainJob{
		submit(t, trainJob("wait-a", "torch-wait", 1, gpusPerNode)),
		submit(t, trainJob("wait-b", "torch-wait", 1, gpusPerNode)),
		submit(t, trainJob("wait-c", "torch-wait", 1, gpusPerNode)),
	}
	message := func(wl *kueue.Workload) string {
		for _, s := range wl.Status.AdmissionChecks {
			return s.Message
		}
		return ""
	}
	waiting := func(g Gomega) {
		onHub, queuedOn := []string{}, map[string]string{}
		for _, tj := range append([]*trainer.TrainJob{wide}, narrow...) {
			wl := util.WorkloadOf(g, c, tj)
			g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved)).To(BeTrue(), "%s holds quota", tj.Name)
			g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadEvicted)).To(BeFalse(), "%s evicted", tj.Name)
			switch ds := dispatchesOf(g, wl); len(ds) {
			case 0:
				g.Expect(wl.Status.AdmissionChecks).To(ContainElement(HaveField("State", kueue.CheckStatePending)), "%s's check", tj.Name)
				g.Expect(message(wl)).To(HavePrefix(dispatch.WaitingPrefix), "%s waits on the hub", tj.Name)
				onHub = append(onHub, tj.Name)
			case 1:
				// Its JobSet is made and its pod waits for the spoke's
				// scheduler: submitted, not running.
				g.Expect(ds[0].Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationQueued, "true"), "%s sent beyond the free GPUs", tj.Name)
				g.Expect(ds[0].Status.Phase).To(Equal(v1alpha1.DispatchSubmitted), "%s's Dispatch", tj.Name)
				queuedOn[tj.Name] = ds[0].Spec.TargetName
			default:
				g.Expect(ds).To(HaveLen(1), "%s's Dispatches", tj.Name)
			}
		}
		g.Expect(onHub).To(ContainElement(wide.Name), "a job of two pods is never queued on a spoke")
		g.Expect(queuedOn).NotTo(BeEmpty(), "jobs of one pod wait in the spokes' queues")
	}
	g.Eventually(waiting, util.Timeout, util.Interval).Should(Succeed())
	g.Consistently(waiting, 3*time.Second, util.Interval).Should(Succeed())

	for _, tj := range fillers {
		g.Expect(c.Delete(ctx, tj, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	}
	for _, tj := range append([]*trainer.TrainJob{wide}, narrow...) {
		waitRunning(t, tj)
	}
}

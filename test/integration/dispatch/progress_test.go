package dispatch

import (
	"context"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/dispatch"
	"github.com/trainyard-dev/trainyard/test/util"
)

func progressReport(pct int32) *trainer.TrainerStatus {
	return &trainer.TrainerStatus{ProgressPercentage: ptr.To(pct), EstimatedRemainingSeconds: ptr.To[int32](120),
		Metrics: []trainer.Metric{{Name: "loss", Value: "0.25"}}, LastUpdatedTime: metav1.NewTime(time.Now().Truncate(time.Second))}
}

// reportOnDispatch writes a progress report into d's status the way the
// agent carries one.
func reportOnDispatch(g Gomega, d *v1alpha1.Dispatch, ts *trainer.TrainerStatus) {
	ctx, c := context.Background(), env.fleet.Hub.Client
	g.Eventually(func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
			return err
		}
		d.Status.TrainerStatus = ts
		return c.Status().Update(ctx, d)
	}, util.Timeout, util.Interval).Should(Succeed())
}

// TestProgressOnDispatchReachesTrainJob: a report the agent carries on the
// live Dispatch shows in the TrainJob's status.trainerStatus, written by
// server-side apply as trainyard-progress alone; the next report within
// MinProgressInterval is held back; the API server refuses a report out of
// Trainer's bounds on the Dispatch.
func TestProgressOnDispatchReachesTrainJob(t *testing.T) {
	g := NewWithT(t)
	ctx, c := context.Background(), env.fleet.Hub.Client
	makeRuntime(t, "torch-progress", "10m")
	tj := submit(t, trainJob("progress", "torch-progress", 1, 2))
	_, d := waitRunning(t, tj)

	first := progressReport(10)
	reportOnDispatch(g, &d, first)
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tj), tj)).To(Succeed())
		g.Expect(tj.Status.TrainerStatus).NotTo(BeNil())
		g.Expect(tj.Status.TrainerStatus.ProgressPercentage).To(Equal(ptr.To[int32](10)))
		g.Expect(tj.Status.TrainerStatus.Metrics).To(Equal(first.Metrics))
	}, util.Timeout, util.Interval).Should(Succeed())
	var progressWriters []metav1.ManagedFieldsEntry
	for _, m := range tj.ManagedFields {
		if m.Manager == dispatch.ProgressFieldOwner {
			progressWriters = append(progressWriters, m)
		}
	}
	g.Expect(progressWriters).To(ConsistOf(And(HaveField("Operation", metav1.ManagedFieldsOperationApply),
		HaveField("Subresource", "status"))), "managed fields %v", tj.ManagedFields)

	// The next report within the interval waits.
	reportOnDispatch(g, &d, progressReport(20))
	g.Consistently(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tj), tj)).To(Succeed())
		g.Expect(tj.Status.TrainerStatus.ProgressPercentage).To(Equal(ptr.To[int32](10)))
	}, 3*time.Second, util.Interval).Should(Succeed())

	// Trainer's bounds hold on the Dispatch too.
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(&d), &d)).To(Succeed())
	d.Status.TrainerStatus = progressReport(101)
	g.Expect(c.Status().Update(ctx, &d)).NotTo(Succeed(), "progress 101 accepted")
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(&d), &d)).To(Succeed())
	d.Status.TrainerStatus = &trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](5)}
	g.Expect(c.Status().Update(ctx, &d)).NotTo(Succeed(), "report without lastUpdatedTime accepted")

	// Once due, the held-back report is written without another event.
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tj), tj)).To(Succeed())
		g.Expect(tj.Status.TrainerStatus.ProgressPercentage).To(Equal(ptr.To[int32](20)))
	}, dispatch.MinProgressInterval+util.Timeout, util.Interval).Should(Succeed())
}

package util

import (
	"context"
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CreateTrainJob creates tj through c, once, as a user does, and reads it
// back into tj. The pinning webhook answers only once the rest of the
// admission chain sees the pinned copy, so nothing here retries.
func CreateTrainJob(g gomega.Gomega, c client.Client, tj *trainer.TrainJob) {
	ctx := context.Background()
	g.Expect(c.Create(ctx, tj)).To(gomega.Succeed())
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tj), tj)).To(gomega.Succeed())
}

// SubmitTrainJob creates tj on the hub through c, as a user does, and at
// the end of the test deletes it and waits until remoteLeft counts none of
// its remote work, so the next test starts on empty spokes.
func SubmitTrainJob(t *testing.T, c client.Client, tj *trainer.TrainJob, remoteLeft func(gomega.Gomega) int) *trainer.TrainJob {
	t.Helper()
	CreateTrainJob(gomega.NewWithT(t), c, tj)
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), tj, client.PropagationPolicy(metav1.DeletePropagationBackground))
		gomega.NewWithT(t).Eventually(func(g gomega.Gomega) { g.Expect(remoteLeft(g)).To(gomega.BeZero()) },
			Timeout, Interval).Should(gomega.Succeed(), "remote work of %s outlived it", tj.Name)
	})
	return tj
}

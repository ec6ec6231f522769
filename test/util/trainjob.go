package util

import (
	"context"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/onsi/gomega"
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

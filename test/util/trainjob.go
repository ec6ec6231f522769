package util

import (
	"context"
	"strings"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CreateTrainJob creates tj through c and reads it back into tj. Kueue's
// TrainJob webhook reads runtimes from its own cache, which may not hold
// the pinned copy trainyard's webhook has just made (see the README's
// known limits), so a "not found" is retried for a while, as a kubectl
// user would; any other error fails at once.
func CreateTrainJob(g gomega.Gomega, c client.Client, tj *trainer.TrainJob) {
	ctx := context.Background()
	g.Eventually(func() error {
		err := c.Create(ctx, tj.DeepCopy())
		if err != nil && !strings.Contains(err.Error(), "not found") {
			return gomega.StopTrying("create TrainJob").Wrap(err)
		}
		return err
	}, 10*time.Second, 500*time.Millisecond).Should(gomega.Succeed())
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tj), tj)).To(gomega.Succeed())
}

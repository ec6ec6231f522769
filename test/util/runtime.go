package util

import (
	"context"
	"testing"

	"github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// CreateForTest creates obj through c and deletes it when the test ends.
func CreateForTest(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	gomega.NewWithT(t).Expect(c.Create(context.Background(), obj)).To(gomega.Succeed(), "create %s", obj.GetName())
	t.Cleanup(func() { _ = c.Delete(context.Background(), obj) })
}

// KwokRuntime is a ClusterTrainingRuntime whose pods tolerate the kwok
// nodes' taint and, on them, run for runFor (a Go duration) and succeed.
func KwokRuntime(name, runFor string) *tytesting.ClusterTrainingRuntimeWrapper {
	return tytesting.MakeClusterTrainingRuntime(name).Toleration(kube.KwokToleration).
		PodAnnotation("kwok.trainyard.dev/run-for", runFor)
}

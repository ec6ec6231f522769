package api

import (
	"context"
	"strings"
	"testing"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/spoke"
)

// TestAgentRefusesASpokeWithoutItsWorkloadAPI: an agent whose spoke does
// not serve its Target's workload API (LeaderWorkerSet, JobSet) stops at
// start with a message saying what to install, rather than waiting forever
// for an informer.
func TestAgentRefusesASpokeWithoutItsWorkloadAPI(t *testing.T) {
	ctx := context.Background()
	target := tytesting.MakeKubernetesTarget("no-lws", "gpu").Kubernetes(&v1alpha1.KubernetesTarget{
		Backend: v1alpha1.KubernetesBackendLeaderWorkerSet,
	}).Obj()
	if err := k8sClient.Create(ctx, target); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8sClient.Delete(ctx, target) })
	// The API server is hub and spoke at once; it serves no LeaderWorkerSets.
	_, err := spoke.NewKubernetesAgent(ctx, apiServer.Config, spoke.KubernetesOptions{
		Target: target.Name, Spoke: apiServer.Config, SkipNameValidation: true,
	})
	if err == nil || !strings.Contains(err.Error(), "its spoke does not serve leaderworkerset.x-k8s.io/v1 LeaderWorkerSet (install LeaderWorkerSet") {
		t.Fatalf("agent start error = %v, want a refusal naming the missing LeaderWorkerSet API", err)
	}

	target.Spec.Kubernetes.Backend = v1alpha1.KubernetesBackendJobSet
	if err := k8sClient.Update(ctx, target); err != nil {
		t.Fatal(err)
	}
	_, err = spoke.NewKubernetesAgent(ctx, apiServer.Config, spoke.KubernetesOptions{
		Target: target.Name, Spoke: apiServer.Config, SkipNameValidation: true,
	})
	if err == nil || !strings.Contains(err.Error(), "its spoke does not serve jobset.x-k8s.io/v1alpha2 JobSet (install JobSet") {
		t.Fatalf("JobSet agent start error = %v, want a refusal naming the missing JobSet API", err)
	}
}

// Package api tests trainyard's CRDs as the API server serves them: the
// OpenAPI bounds and CEL rules that reject bad Targets and Dispatches.
package api

import (
	"context"
	"fmt"
	"os"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
)

var (
	k8sClient client.Client
	// apiServer serves trainyard's and Kueue's CRDs and nothing else.
	apiServer *kube.Cluster
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	cluster, err := kube.Start(context.Background(), kube.Options{Name: "api", CRDs: []string{kube.CRDsTrainyard, kube.CRDsKueue}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start API server:", err)
		return 1
	}
	defer cluster.Stop()
	k8sClient, apiServer = cluster.Client, cluster
	return m.Run()
}

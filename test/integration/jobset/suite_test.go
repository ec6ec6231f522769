// Package jobset runs the JobSet backend against a real spoke: its JobSets
// are admitted by the JobSet webhooks, become Jobs and pods, and kwok runs
// the pods on simulated GPU nodes.
package jobset

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trainyard-dev/trainyard/test/harness/kube"
	"github.com/trainyard-dev/trainyard/test/util"
)

const (
	rackLabel = "topology.kubernetes.io/rack"
	jobsNS    = "trainyard-jobs"
	// gpusPerNode on every one of the suite's nodes.
	gpusPerNode = 4
)

var (
	spoke *kube.Cluster
	// cached reads through an informer cache, as the agent's manager client
	// does; the backend under test uses it, assertions use spoke.Client.
	cached client.Client
	// nodes: two racks of two 4-GPU nodes.
	nodes = []kube.NodeSpec{
		{Name: "gpu-r1-a", GPUs: gpusPerNode, Labels: map[string]string{rackLabel: "r1"}},
		{Name: "gpu-r1-b", GPUs: gpusPerNode, Labels: map[string]string{rackLabel: "r1"}},
		{Name: "gpu-r2-a", GPUs: gpusPerNode, Labels: map[string]string{rackLabel: "r2"}},
		{Name: "gpu-r2-b", GPUs: gpusPerNode, Labels: map[string]string{rackLabel: "r2"}},
	}
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := ""
	if a := os.Getenv("TRAINYARD_ARTIFACTS"); a != "" {
		dir = filepath.Join(a, "jobset-spoke")
	}
	t0 := time.Now()
	c, err := kube.Start(ctx, kube.SpokeOptions("spoke", dir))
	if err != nil {
		fmt.Fprintln(os.Stderr, "start spoke:", err)
		return 1
	}
	spoke = c
	defer func() {
		util.DumpLogsOnFailure(code, spoke)
		cancel() // close the cache's watches before the API server stops
		t1 := time.Now()
		_ = spoke.Stop()
		fmt.Printf("spoke stopped in %v\n", time.Since(t1).Round(100*time.Millisecond))
	}()
	if err := setUp(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "set up spoke:", err)
		return 1
	}
	fmt.Printf("spoke with %d kwok GPU nodes ready in %v\n", len(nodes), time.Since(t0).Round(100*time.Millisecond))
	return m.Run()
}

func setUp(ctx context.Context) error {
	ctrllog.SetLogger(logr.Discard())
	if err := spoke.AddKwokNodes(ctx, nodes...); err != nil {
		return err
	}
	cl, err := cluster.New(spoke.Config, func(o *cluster.Options) { o.Scheme = kube.Scheme() })
	if err != nil {
		return err
	}
	go func() { _ = cl.Start(ctx) }()
	if !cl.GetCache().WaitForCacheSync(ctx) {
		return fmt.Errorf("cache did not sync")
	}
	cached = cl.GetClient()
	return wait.PollUntilContextTimeout(ctx, util.Interval, util.Timeout, true, func(ctx context.Context) (bool, error) {
		var list corev1.NodeList
		if err := spoke.Client.List(ctx, &list); err != nil {
			return false, err
		}
		ready := 0
		for _, n := range list.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready == len(nodes), nil
	})
}

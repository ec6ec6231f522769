package util

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
)

// RunSpokeSuite is the TestMain of a suite that drives one backend against
// one spoke: it starts the spoke as opts say with the kwok nodes, hands it
// and an informer-cached client (as the agent's manager reads) to ready,
// runs the tests and stops the spoke, dumping its logs if a test failed.
// Logs go below $TRAINYARD_ARTIFACTS/<artifacts> when that is set.
// cacheOpts configure the cache as SetUpSpoke's.
func RunSpokeSuite(m *testing.M, artifacts string, opts kube.Options, nodes []kube.NodeSpec, ready func(*kube.Cluster, client.Client),
	cacheOpts ...cluster.Option) (code int) {
	ctrllog.SetLogger(logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if a := os.Getenv("TRAINYARD_ARTIFACTS"); a != "" {
		opts.Dir = filepath.Join(a, artifacts)
	}
	t0 := time.Now()
	spoke, err := kube.Start(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start spoke:", err)
		return 1
	}
	defer func() {
		DumpLogsOnFailure(code, spoke)
		cancel() // close the cache's watches before the API server stops
		t1 := time.Now()
		_ = spoke.Stop()
		fmt.Printf("spoke stopped in %v\n", time.Since(t1).Round(100*time.Millisecond))
	}()
	cached, err := SetUpSpoke(ctx, spoke, nodes, cacheOpts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "set up spoke:", err)
		return 1
	}
	ready(spoke, cached)
	fmt.Printf("spoke with %d kwok GPU nodes ready in %v\n", len(nodes), time.Since(t0).Round(100*time.Millisecond))
	return m.Run()
}

// SetUpSpoke adds the kwok nodes to spoke, waits until they are Ready and
// returns a client reading through an informer cache, as the agent's
// manager does (cacheOpts, such as spoke.SpokeClusterOptions, after the
// sandbox's scheme); the cache lives as long as ctx.
func SetUpSpoke(ctx context.Context, spoke *kube.Cluster, nodes []kube.NodeSpec, cacheOpts ...cluster.Option) (client.Client, error) {
	if err := spoke.AddKwokNodes(ctx, nodes...); err != nil {
		return nil, err
	}
	cl, err := cluster.New(spoke.Config, append([]cluster.Option{func(o *cluster.Options) { o.Scheme = kube.Scheme() }}, cacheOpts...)...)
	if err != nil {
		return nil, err
	}
	go func() { _ = cl.Start(ctx) }()
	if !cl.GetCache().WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("cache did not sync")
	}
	return cl.GetClient(), WaitNodesReady(ctx, spoke.Client, len(nodes))
}

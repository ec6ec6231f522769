// Package tenancy runs two tenants' jobs on one spoke: each hub namespace
// gets a spoke namespace of its own, with Pod Security labels and a
// default-deny NetworkPolicy, and what one tenant's runtime patch may not
// set on the Target is refused before anything reaches the spoke.
package tenancy

import (
	"bytes"
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/trainyard-dev/trainyard/backends/kubework"
	trainyard "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/controllers"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/test/util"
)

const (
	flavor  = "gpu"
	tenantA = "team-a"
	tenantB = "team-b"
	queue   = "lq"
	// prefix is the Target's spec.kubernetes.namespace.
	prefix = "tenants"
)

var (
	// controllerLog holds everything the hub and the agent log, for the
	// check that no secret reaches it.
	controllerLog syncBuffer
	fleet         *kube.Fleet
	spoke         *kube.Cluster
	// nsA and nsB are the tenants' namespaces on the spoke.
	nsA = kubework.TenantNamespace(prefix, tenantA)
	nsB = kubework.TenantNamespace(prefix, tenantB)
)

func TestMain(m *testing.M) {
	os.Exit(util.RunFleetSuite(m, util.FleetSuite{
		Fleet:   kube.FleetOptions{Spokes: 1},
		LogAlso: &controllerLog,
		Nodes: func(*kube.Cluster) []kube.NodeSpec {
			return []kube.NodeSpec{{Name: "gpu-0", GPUs: 4}, {Name: "gpu-1", GPUs: 4}}
		},
		// Both tenants share one ClusterQueue, so both are placed on the spoke.
		Queues: []trainyard.Queue{
			{ClusterQueue: "cq", Namespace: tenantA, LocalQueue: queue, Flavor: flavor, GPUs: "64"},
			{ClusterQueue: "cq", Namespace: tenantB, LocalQueue: queue, Flavor: flavor, GPUs: "64"},
		},
		SetUp: func(_ context.Context, e *util.FleetEnv) error {
			fleet, spoke = e.Fleet, e.Spokes[0]
			return nil
		},
		Options: &trainyard.Options{
			Flavor: flavor, SpokeNamespace: prefix,
			HeartbeatInterval: time.Second, FenceInterval: 2 * time.Second, Resync: 5 * time.Second,
		},
	}))
}

// syncBuffer is a bytes.Buffer the controllers' goroutines may write at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

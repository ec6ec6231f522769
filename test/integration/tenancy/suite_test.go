// Package tenancy runs two tenants' jobs on one spoke: each hub namespace
// gets a spoke namespace of its own, with Pod Security labels and a
// default-deny NetworkPolicy, and what one tenant's runtime patch may not
// set on the Target is refused before anything reaches the spoke.
package tenancy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

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
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	ctrl.SetLogger(zap.New(zap.WriteTo(io.MultiWriter(util.LogSink("trainyard-controllers.log"), &controllerLog)), zap.UseDevMode(true)))
	ctx := context.Background()
	f, err := kube.StartFleet(ctx, kube.FleetOptions{Spokes: 1, Dir: os.Getenv("TRAINYARD_ARTIFACTS")})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start fleet:", err)
		return 1
	}
	var controllers *trainyard.Controllers
	defer func() {
		if controllers != nil {
			controllers.Stop()
		}
		util.DumpLogsOnFailure(code, f.Hub, f.Spokes[0])
		_ = f.Stop()
	}()
	fleet, spoke = f, f.Spokes[0]
	var nodes []kube.NodeSpec
	for i := range 2 {
		nodes = append(nodes, kube.NodeSpec{Name: fmt.Sprintf("gpu-%d", i), GPUs: 4})
	}
	if err := spoke.AddKwokNodes(ctx, nodes...); err != nil {
		fmt.Fprintln(os.Stderr, "add nodes:", err)
		return 1
	}
	// Both tenants share one ClusterQueue, so both are placed on the spoke.
	for _, ns := range []string{tenantA, tenantB} {
		q := trainyard.Queue{ClusterQueue: "cq", Namespace: ns, LocalQueue: queue, Flavor: flavor, GPUs: "64"}
		if err := trainyard.SetUpQueue(ctx, f.Hub, q); err != nil {
			fmt.Fprintln(os.Stderr, "set up queues:", err)
			return 1
		}
	}
	controllers, err = trainyard.Start(ctx, f, trainyard.Options{
		Flavor: flavor, SpokeNamespace: prefix,
		HeartbeatInterval: time.Second, FenceInterval: 2 * time.Second, Resync: 5 * time.Second,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start trainyard:", err)
		return 1
	}
	return m.Run()
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

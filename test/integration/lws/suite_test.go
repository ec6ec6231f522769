// Package lws runs the LeaderWorkerSet backend against a real spoke: the
// LWS manager and its webhooks turn a LeaderWorkerSet into StatefulSets and
// pods, and kwok runs the pods on simulated GPU nodes, restarting their
// containers as a kubelet does when a run ends. The spoke is also a hub's
// Target with backend LeaderWorkerSet, so a TrainJob goes the whole way.
package lws

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/kubework"
	trainyard "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/controllers"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/test/util"
)

const (
	rackLabel   = "topology.kubernetes.io/rack"
	gpusPerNode = 4
	// jobsPrefix is the namespace prefix of the tests that drive the
	// backend directly; the agent's is agentPrefix, so its fence never
	// sees their sets.
	jobsPrefix  = "trainyard-jobs"
	agentPrefix = "jobs"
	tenant      = "team-a"
	queue       = "lq"
	flavor      = "gpu"
)

var (
	// kwokPolicy is the backend's pod policy in the tests that drive it
	// directly: their runtimes tolerate the kwok taint, as runtimes written
	// for kwok do (the agent's Target allows it through the harness).
	kwokPolicy = kubework.PodPolicy{Allowed: v1alpha1.AllowedPodFields{TolerationKeys: []string{kube.KwokTaint.Key}}}
	// jobsNS and agentJobsNS are where the tenant's sets are, under each prefix.
	jobsNS      = kubework.TenantNamespace(jobsPrefix, tenant)
	agentJobsNS = kubework.TenantNamespace(agentPrefix, tenant)

	fleet *kube.Fleet
	spoke *kube.Cluster
	// cached reads through an informer cache, as the agent's manager does.
	cached client.Client
	// nodes: two racks of two 4-GPU nodes.
	nodes = kube.RackNodes(rackLabel, 2, gpusPerNode, "r1", "r2")
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	ctrllog.SetLogger(zap.New(zap.WriteTo(util.LogSink("trainyard-controllers.log")), zap.UseDevMode(true)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t0 := time.Now()
	f, err := kube.StartFleet(ctx, kube.FleetOptions{Spokes: 1, LWS: true, Dir: os.Getenv("TRAINYARD_ARTIFACTS")})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start fleet:", err)
		return 1
	}
	fleet, spoke = f, f.Spokes[0]
	var controllers *trainyard.Controllers
	defer func() {
		if controllers != nil {
			controllers.Stop()
		}
		util.DumpLogsOnFailure(code, f.Hub, spoke)
		cancel()
		_ = f.Stop()
	}()
	if err := setUp(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "set up:", err)
		return 1
	}
	controllers, err = trainyard.Start(ctx, f, trainyard.Options{
		Flavor: flavor, TopologyLevels: []string{rackLabel}, SpokeNamespace: agentPrefix,
		SpokeBackends:     map[string]v1alpha1.KubernetesBackend{spoke.Name: v1alpha1.KubernetesBackendLeaderWorkerSet},
		HeartbeatInterval: 2 * time.Second, Resync: 5 * time.Second,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start trainyard:", err)
		return 1
	}
	fmt.Printf("hub and LWS spoke with %d kwok GPU nodes ready in %v\n", len(nodes), time.Since(t0).Round(100*time.Millisecond))
	return m.Run()
}

func setUp(ctx context.Context) (err error) {
	if cached, err = util.SetUpSpoke(ctx, spoke, nodes); err != nil {
		return err
	}
	return trainyard.SetUpQueue(ctx, fleet.Hub, trainyard.Queue{
		ClusterQueue: "cq", Namespace: tenant, LocalQueue: queue, Flavor: flavor, GPUs: "16",
	})
}

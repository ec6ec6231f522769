// Package dispatch runs trainyard end to end on the harness: a hub with
// Kueue and trainyard's hub controllers, two Kubernetes spokes each with its
// agent, TrainJobs that run as JobSets on kwok GPU nodes.
package dispatch

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/kubework"
	trainyard "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/controllers"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/test/util"
)

const (
	flavor        = "gpu"
	tenant        = "team-a"
	queue         = "lq"
	gpusPerNode   = 4
	nodesPerSpoke = 4
	// lostTimeout is the agents' lease, short so the lost-agent test is
	// quick, and leaseGrace the hub's wait after it before a requeue;
	// heartbeats come every heartbeatEvery.
	lostTimeout    = 10 * time.Second
	leaseGrace     = 5 * time.Second
	heartbeatEvery = time.Second
)

// spokeNS is where the tenant's jobs run on the spokes (the harness's
// Targets use the prefix "jobs").
var spokeNS = kubework.TenantNamespace("jobs", tenant)

var env *environment

type environment struct {
	fleet      *kube.Fleet
	hub        *trainyard.Component
	agents     map[string]*trainyard.Component
	agentCfg   map[string]*rest.Config
	metricsURL string
	// statusAddrs are the agents' status endpoints, by spoke.
	statusAddrs map[string]string
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	ctrl.SetLogger(zap.New(zap.WriteTo(util.LogSink("trainyard-controllers.log")), zap.UseDevMode(true)))
	ctx := context.Background()
	f, err := kube.StartFleet(ctx, kube.FleetOptions{Spokes: 2, Dir: os.Getenv("TRAINYARD_ARTIFACTS")})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start fleet:", err)
		return 1
	}
	var controllers *trainyard.Controllers
	defer func() {
		if controllers != nil {
			controllers.Stop()
		}
		util.DumpLogsOnFailure(code, append([]*kube.Cluster{f.Hub}, f.Spokes...)...)
		_ = f.Stop()
	}()
	if err := addNodes(ctx, f); err != nil {
		fmt.Fprintln(os.Stderr, "add nodes:", err)
		return 1
	}
	q := trainyard.Queue{ClusterQueue: "cq", Namespace: tenant, LocalQueue: queue, Flavor: flavor, GPUs: "64"}
	if err := trainyard.SetUpQueue(ctx, f.Hub, q); err != nil {
		fmt.Fprintln(os.Stderr, "set up queues:", err)
		return 1
	}
	controllers, err = trainyard.Start(ctx, f, trainyard.Options{
		Flavor: flavor, TopologyLevels: []string{"topology.kubernetes.io/rack"},
		LostTargetTimeout: lostTimeout, LeaseGrace: leaseGrace, HeartbeatInterval: heartbeatEvery,
		// Kubeflow's torch-distributed-with-cache runs its initializer as this.
		AllowedPodFields: &v1alpha1.AllowedPodFields{ServiceAccountNames: []string{"kubeflow-trainer-cache-initializer"}},
		FenceInterval:    2 * time.Second, Resync: 5 * time.Second,
		SpokeStatus: true,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start trainyard:", err)
		return 1
	}
	env = &environment{fleet: f, hub: controllers.Hub, agents: controllers.Agents,
		agentCfg: controllers.AgentConfigs, metricsURL: controllers.MetricsURL, statusAddrs: controllers.StatusAddrs}
	return m.Run()
}

func addNodes(ctx context.Context, f *kube.Fleet) error {
	for _, s := range f.Spokes {
		var nodes []kube.NodeSpec
		for i := 0; i < nodesPerSpoke; i++ {
			nodes = append(nodes, kube.NodeSpec{
				Name: fmt.Sprintf("%s-gpu-%d", s.Name, i), GPUs: gpusPerNode,
				Labels: map[string]string{"topology.kubernetes.io/rack": fmt.Sprintf("rack-%d", i/2)},
			})
		}
		if err := s.AddKwokNodes(ctx, nodes...); err != nil {
			return err
		}
	}
	return nil
}

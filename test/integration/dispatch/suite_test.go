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
	os.Exit(util.RunFleetSuite(m, util.FleetSuite{
		Fleet:  kube.FleetOptions{Spokes: 2},
		Nodes:  rackedNodes,
		Queues: []trainyard.Queue{{ClusterQueue: "cq", Namespace: tenant, LocalQueue: queue, Flavor: flavor, GPUs: "64"}},
		Options: &trainyard.Options{
			Flavor: flavor, TopologyLevels: []string{"topology.kubernetes.io/rack"},
			LostTargetTimeout: lostTimeout, LeaseGrace: leaseGrace, HeartbeatInterval: heartbeatEvery,
			// Kubeflow's torch-distributed-with-cache runs its initializer as this.
			AllowedPodFields: &v1alpha1.AllowedPodFields{ServiceAccountNames: []string{"kubeflow-trainer-cache-initializer"}},
			FenceInterval:    2 * time.Second, Resync: 5 * time.Second,
			SpokeStatus: true,
		},
		Started: func(_ context.Context, e *util.FleetEnv) error {
			c := e.Controllers
			env = &environment{fleet: e.Fleet, hub: c.Hub, agents: c.Agents,
				agentCfg: c.AgentConfigs, metricsURL: c.MetricsURL, statusAddrs: c.StatusAddrs}
			return nil
		},
	}))
}

// rackedNodes are a spoke's nodesPerSpoke nodes, two to a rack.
func rackedNodes(s *kube.Cluster) []kube.NodeSpec {
	var nodes []kube.NodeSpec
	for i := 0; i < nodesPerSpoke; i++ {
		nodes = append(nodes, kube.NodeSpec{
			Name: fmt.Sprintf("%s-gpu-%d", s.Name, i), GPUs: gpusPerNode,
			Labels: map[string]string{"topology.kubernetes.io/rack": fmt.Sprintf("rack-%d", i/2)},
		})
	}
	return nodes
}

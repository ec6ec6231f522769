// Package lws runs the LeaderWorkerSet backend against a real spoke: the
// LWS manager and its webhooks turn a LeaderWorkerSet into StatefulSets and
// pods, and kwok runs the pods on simulated GPU nodes, restarting their
// containers as a kubelet does when a run ends. The spoke is also a hub's
// Target with backend LeaderWorkerSet, so a TrainJob goes the whole way.
package lws

import (
	"context"
	"os"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

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
	os.Exit(util.RunFleetSuite(m, util.FleetSuite{
		Fleet:      kube.FleetOptions{Spokes: 1, LWS: true},
		Nodes:      func(*kube.Cluster) []kube.NodeSpec { return nodes },
		NodesReady: true,
		Queues:     []trainyard.Queue{{ClusterQueue: "cq", Namespace: tenant, LocalQueue: queue, Flavor: flavor, GPUs: "16"}},
		SetUp: func(_ context.Context, e *util.FleetEnv) error {
			fleet, spoke = e.Fleet, e.Spokes[0]
			cached = e.Cached[spoke.Name]
			return nil
		},
		Options: &trainyard.Options{
			Flavor: flavor, TopologyLevels: []string{rackLabel}, SpokeNamespace: agentPrefix,
			// StartFleet names its one spoke spoke1.
			SpokeBackends:     map[string]v1alpha1.KubernetesBackend{"spoke1": v1alpha1.KubernetesBackendLeaderWorkerSet},
			HeartbeatInterval: 2 * time.Second, Resync: 5 * time.Second,
		},
	}))
}

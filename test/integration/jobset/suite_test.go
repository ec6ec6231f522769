// Package jobset runs the JobSet backend against a real spoke: its JobSets
// are admitted by the JobSet webhooks, become Jobs and pods, and kwok runs
// the pods on simulated GPU nodes.
package jobset

import (
	"os"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/backends/kubework"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	agent "github.com/trainyard-dev/trainyard/spoke"
	"github.com/trainyard-dev/trainyard/test/util"
)

const (
	rackLabel = "topology.kubernetes.io/rack"
	// jobsPrefix is the backend's namespace prefix; team-a's JobSets are in jobsNS.
	jobsPrefix = "trainyard-jobs"
	// gpusPerNode on every one of the suite's nodes.
	gpusPerNode = 4
)

var (
	jobsNS = kubework.TenantNamespace(jobsPrefix, "team-a")

	spoke *kube.Cluster
	// cached reads through an informer cache set up as the agent's
	// (spoke.SpokeClusterOptions); the backend under test uses it,
	// assertions use spoke.Client.
	cached client.Client
	// nodes: two racks of two 4-GPU nodes.
	nodes = kube.RackNodes(rackLabel, 2, gpusPerNode, "r1", "r2")
	// kwokAllowed is the suite's Target allowlist: the tests' runtimes and
	// patches tolerate the kwok taint, as runtimes written for kwok do.
	kwokAllowed = v1alpha1.AllowedPodFields{TolerationKeys: []string{kube.KwokTaint.Key}}
	kwokPolicy  = kubework.PodPolicy{Allowed: kwokAllowed}
)

func TestMain(m *testing.M) {
	os.Exit(util.RunSpokeSuite(m, "jobset-spoke", kube.SpokeOptions("spoke", ""), nodes, func(c *kube.Cluster, cl client.Client) {
		spoke, cached = c, cl
	}, agent.SpokeClusterOptions(backends.KindJobSet)))
}

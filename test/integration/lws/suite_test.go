// Package lws runs the LeaderWorkerSet backend against a real spoke: the
// LWS manager and its webhooks turn a LeaderWorkerSet into StatefulSets and
// pods, and kwok runs the pods on simulated GPU nodes, restarting their
// containers as a kubelet does when a run ends.
package lws

import (
	"os"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/test/harness/kube"
	"github.com/trainyard-dev/trainyard/test/util"
)

const (
	rackLabel   = "topology.kubernetes.io/rack"
	jobsNS      = "trainyard-jobs"
	gpusPerNode = 4
)

var (
	spoke *kube.Cluster
	// cached reads through an informer cache, as the agent's manager does.
	cached client.Client
	// nodes: two racks of two 4-GPU nodes.
	nodes = kube.RackNodes(rackLabel, 2, gpusPerNode, "r1", "r2")
)

func TestMain(m *testing.M) {
	opts := kube.SpokeOptions("spoke", "")
	opts.LWS = true
	os.Exit(util.RunSpokeSuite(m, "lws-spoke", opts, nodes, func(c *kube.Cluster, cl client.Client) {
		spoke, cached = c, cl
	}))
}

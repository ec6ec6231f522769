// Package quota runs the quota samples of config/samples on the harness: a
// hub with Kueue (fair sharing on), two kwok GPU spokes as Targets spoke1
// and spoke2, and the sample ClusterQueues, cohort and priority classes
// applied verbatim. Its test walks one story through them: borrowing an
// idle spoke, a lender reclaiming its quota by fair-sharing preemption, and
// a high-priority job preempting a low-priority one of its own team, with
// trainyard cancelling the preempted jobs' remote JobSets each time.
package quota

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainyard "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/controllers"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/test/util"
)

const (
	gpusPerNode   = 4
	nodesPerSpoke = 4 // 16 GPUs per spoke, the samples' nominal quota
)

// sampleFlavors are the flavors the samples give each spoke's Target.
var sampleFlavors = map[string]string{"spoke1": "spoke1-gpu", "spoke2": "spoke2-gpu"}

var env struct {
	fleet *kube.Fleet
	// samples are the sample Kueue objects as applied.
	samples []*unstructured.Unstructured
}

func TestMain(m *testing.M) {
	os.Exit(util.RunFleetSuite(m, util.FleetSuite{
		Fleet: kube.FleetOptions{Spokes: 2, KueueFairSharing: true},
		Nodes: func(s *kube.Cluster) []kube.NodeSpec { return util.KwokNodes(s, nodesPerSpoke, gpusPerNode) },
		SetUp: func(ctx context.Context, e *util.FleetEnv) (err error) {
			env.fleet = e.Fleet
			if env.samples, err = applySamples(ctx, e.Hub); err != nil {
				return fmt.Errorf("apply samples: %w", err)
			}
			return nil
		},
		Options: &trainyard.Options{
			SpokeFlavors: sampleFlavors, HeartbeatInterval: time.Second,
			FenceInterval: 2 * time.Second, Resync: 5 * time.Second,
		},
	}))
}

// applySamples creates the sample namespaces and Kueue objects unchanged.
// The sample Targets are not applied: the harness registers the spokes
// itself, with the samples' flavors, and this suite runs no Slurm cluster
// (no test job fits the Slurm allocation, so Kueue never assigns it).
func applySamples(ctx context.Context, hub *kube.Cluster) ([]*unstructured.Unstructured, error) {
	root, err := kube.RepoRoot()
	if err != nil {
		return nil, err
	}
	var applied []*unstructured.Unstructured
	for _, name := range []string{"00-namespaces.yaml", "20-kueue.yaml"} {
		objs, err := util.ReadManifests(filepath.Join(root, "config", "samples", name))
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			if err := hub.Client.Create(ctx, o, client.FieldValidation("Strict")); client.IgnoreAlreadyExists(err) != nil {
				return nil, fmt.Errorf("%s: %s %s: %w", name, o.GetKind(), o.GetName(), err)
			}
			applied = append(applied, o)
		}
	}
	return applied, nil
}

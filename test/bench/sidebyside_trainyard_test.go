package bench

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobset "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	trainyard "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/controllers"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// wideNodesPerSpoke of 8 GPUs: three spokes hold 1,008 one-GPU jobs, so the
// side-by-side round's 1,000 all find room.
const wideNodesPerSpoke = 42

// lightSpoke is a spoke of MultiKueue's worker shape for trainyard: the
// JobSet controller and kwok's simulated nodes (the agent publishes what
// Ready nodes hold), no scheduler or controller manager, so no pods.
func lightSpoke(name, dir string) kube.Options {
	return kube.Options{Name: name, Dir: dir, CRDs: []string{kube.CRDsJobSet, kube.CRDsLWS}, Kwok: true, JobSet: true}
}

// trainyardWideRound starts a hub and three light spokes with trainyard's
// hub and agents, creates n one-GPU TrainJobs and returns their times to
// remote JobSet, with the hub's decision and reconcile p99s.
func trainyardWideRound(b *testing.B, n int) (result, []string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := artifacts("trainyard-wide")
	var spokes []kube.Options
	for i := 1; i <= sideBySideSpokes; i++ {
		name := fmt.Sprintf("spoke%d", i)
		spokes = append(spokes, lightSpoke(name, subdir(dir, name)))
	}
	fleet := startClusters(b, kube.HubOptions(subdir(dir, "hub"), true), spokes...)
	defer func() { _ = fleet.Stop() }()
	controllers := startTrainyard(ctx, b, fleet, wideNodesPerSpoke, trainyard.Options{})
	defer controllers.Stop()

	a := newArrivals()
	for _, s := range fleet.Spokes {
		a.watch(ctx, b, s, func(js *jobset.JobSet) string { return js.Labels[v1alpha1.LabelTrainJobUID] })
	}
	before, cpu, api := readHubCost(), newCPUMeter(fleet), startAPIMeter(fleet.Hub.Config)
	parallel(b, n, func(i int) error {
		tj := tytesting.MakeTrainJob(fmt.Sprintf("ty-%d", i), sideBySideNS).Queue("lq").
			RuntimeRef(trainer.ClusterTrainingRuntimeKind, "bench").NumNodes(1).GPUsPerNode(1).Obj()
		return createTimed(ctx, fleet.Hub.Client, tj, a)
	})
	a.waitArrived(b, "trainyard", n, sideBySideTimeout, append([]*kube.Cluster{fleet.Hub}, fleet.Spokes...)...)
	r := a.result()
	settle(b, api, admittedWorkloads(fleet.Hub.Client, sideBySideNS), n)
	r.cpu = cpu.cell(n)
	r.hubAPI = hubRequests(b, api)
	return r, before.cells()
}

// startTrainyard gives each spoke nodes 8-GPU kwok nodes, sets up the hub's
// queue (room for every job) and runtime, starts trainyard's hub and
// agents with o, and waits until every Target reports its GPUs free.
func startTrainyard(ctx context.Context, b *testing.B, fleet *kube.Fleet, nodes int, o trainyard.Options) *trainyard.Controllers {
	prepareFleet(ctx, b, fleet, nodes, tytesting.MakeClusterTrainingRuntime("bench").Obj())
	o.Flavor = "gpu"
	controllers, err := trainyard.Start(ctx, fleet, o)
	if err != nil {
		b.Fatal(err)
	}
	waitFreeGPUs(b, fleet.Hub, len(fleet.Spokes), int64(nodes*gpusPerNode))
	return controllers
}

// prepareFleet gives each spoke nodes 8-GPU kwok nodes and the hub the
// bench's queue, with quota for every job, and the runtime rt.
func prepareFleet(ctx context.Context, b *testing.B, fleet *kube.Fleet, nodes int, rt *trainer.ClusterTrainingRuntime) {
	for _, s := range fleet.Spokes {
		var specs []kube.NodeSpec
		for i := 0; i < nodes; i++ {
			specs = append(specs, kube.NodeSpec{Name: fmt.Sprintf("%s-n%03d", s.Name, i), GPUs: gpusPerNode})
		}
		if err := s.AddKwokNodes(ctx, specs...); err != nil {
			b.Fatal(err)
		}
	}
	if err := trainyard.SetUpQueue(ctx, fleet.Hub, trainyard.Queue{
		ClusterQueue: "cq", Namespace: sideBySideNS, LocalQueue: "lq", Flavor: "gpu", GPUs: "1000000",
	}); err != nil {
		b.Fatal(err)
	}
	if err := fleet.Hub.Client.Create(ctx, rt); err != nil {
		b.Fatal(err)
	}
}

// waitFreeGPUs waits until targets Targets report free GPUs each.
func waitFreeGPUs(b *testing.B, hub *kube.Cluster, targets int, free int64) {
	waitFor(b, "targets reporting free GPUs", func() (int, error) {
		var list v1alpha1.TargetList
		if err := hub.Client.List(context.Background(), &list); err != nil {
			return 0, err
		}
		ready := 0
		for _, t := range list.Items {
			if t.Status.FreeGPUs == free {
				ready++
			}
		}
		return ready, nil
	}, targets)
}

// createTimed creates tj as createTrainJob does and records, under its UID,
// when the first try began: a try the pinning webhook asks to repeat, or
// one it did not answer in time, counts in the job's latency.
func createTimed(ctx context.Context, c client.Client, tj *trainer.TrainJob, a createRecorder) error {
	var err error
	t := time.Now()
	for range 20 {
		obj := tj.DeepCopy()
		if err = c.Create(ctx, obj); err == nil {
			a.create(string(obj.UID), t)
			return nil
		}
		if !strings.HasSuffix(err.Error(), "; retry") && !strings.Contains(err.Error(), "context deadline exceeded") {
			return err
		}
		a.retried()
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

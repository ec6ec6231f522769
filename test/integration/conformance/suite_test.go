// Package conformance runs what users really bring through a whole fleet:
// every ClusterTrainingRuntime Kubeflow Trainer ships, applied unchanged to
// the hub, and TrainJobs written as the Trainer docs write them (with and
// without a command, CPU-only and with GPUs, names at the 63-character
// limit), against a JobSet spoke, a LeaderWorkerSet spoke and the real Slurm
// cluster. It prints a runtime × target matrix; every cell must end
// Succeeded or refused with its reason, without holding quota or looping.
// Trainer's example TrainJobs, and Training Operator's and mpi-operator's
// example jobs converted by the CLI, run under a queue set as the sandbox
// sets its own (cpu, memory and GPUs covered in one flavor).
package conformance

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueuetesting "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/kubework"
	trainyard "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/controllers"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	hslurm "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/slurm"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

const (
	tenant = "team-a"
	// anyQueue's ClusterQueue covers only GPUs, so a job that requests
	// nothing (as the docs write them) is admitted with no flavor and may
	// go to any target.
	anyQueue  = "lq-any"
	anyFlavor = "gpu"
	// spokesQueue is set as the sandbox sets its queue without Slurm (dev
	// up --no-slurm): one flavor, served by both spokes, covering cpu,
	// memory and GPUs with what the spokes' nodes have. A job requesting
	// CPU or memory is admitted with the flavor and runs on either spoke.
	spokesQueue  = "lq-spokes"
	spokesFlavor = "f-spokes"
	// spokeNamespace is the prefix of the spokes' tenant namespaces.
	spokeNamespace = "jobs"
	// cacheInitializerSA is the ServiceAccount Trainer's data-cache runtime
	// runs its initializer as; a site using the cache installs it.
	cacheInitializerSA = "kubeflow-trainer-cache-initializer"
	// exampleSA is the ServiceAccount Trainer's runtime-patches example
	// names; the administrator allows it and creates it.
	exampleSA = "training-sa"
	// exampleTaintKey and exampleNodeLabel are the taint Trainer's
	// runtime-patches example tolerates and the node label it selects by;
	// the administrator allows exactly these.
	exampleTaintKey  = "training-workload"
	exampleNodeLabel = "node-type"
)

// targets of the fleet: name and the backend it runs jobs with.
var targets = []struct{ name, kind string }{
	{"spoke1", "JobSet"}, {"spoke2", "LeaderWorkerSet"}, {"hpc", "Slurm"},
}

// queueOf is the LocalQueue whose ClusterQueue's only flavor is served by
// target alone, so a job that requests CPU, memory or GPUs there runs on it.
func queueOf(target string) string { return "lq-" + target }

func flavorOf(target string) string { return "f-" + target }

var env struct {
	fleet   *kube.Fleet
	cluster *hslurm.Cluster
}

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("skipping conformance tests in -short mode")
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var err error
	if env.cluster, err = hslurm.Start(ctx, hslurm.Options{}); err != nil {
		fmt.Fprintln(os.Stderr, "start Slurm:", err)
		return 1
	}
	defer func() {
		if err := env.cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: stop Slurm cluster:", err)
			code = 1
		}
	}()
	return util.RunFleetSuite(m, util.FleetSuite{
		Fleet:      kube.FleetOptions{Spokes: 2, LWS: true},
		Timeout:    5 * time.Minute,
		LogFile:    "trainyard-conformance-controllers.log",
		Nodes:      func(s *kube.Cluster) []kube.NodeSpec { return spokeNodes(s.Name) },
		NodesReady: true,
		SetUp: func(ctx context.Context, e *util.FleetEnv) error {
			env.fleet = e.Fleet
			if err := setUpSpokes(ctx); err != nil {
				return fmt.Errorf("set up spokes: %w", err)
			}
			if err := setUpQueues(ctx); err != nil {
				return fmt.Errorf("set up queues: %w", err)
			}
			return nil
		},
		Options: &trainyard.Options{
			Flavor: anyFlavor, SpokeNamespace: spokeNamespace,
			AllowedPodFields: &v1alpha1.AllowedPodFields{ServiceAccountNames: []string{cacheInitializerSA, exampleSA},
				TolerationKeys: []string{exampleTaintKey}, NodeSelectorKeys: []string{exampleNodeLabel}},
			SpokeBackends:     map[string]v1alpha1.KubernetesBackend{"spoke2": v1alpha1.KubernetesBackendLeaderWorkerSet},
			LostTargetTimeout: 5 * time.Minute, HeartbeatInterval: time.Second,
			FenceInterval: 2 * time.Second, Resync: 5 * time.Second,
			Slurm: []trainyard.SlurmTarget{{
				Name: "hpc", Cluster: env.cluster, APIVersion: "v0.0.42", PollInterval: time.Second,
				Partitions: []v1alpha1.SlurmPartition{{Flavor: anyFlavor, Partition: "gpu"}, {Flavor: flavorOf("hpc"), Partition: "gpu"}},
				Accounts:   []v1alpha1.SlurmAccount{{Namespace: tenant, User: "alice"}},
			}},
		},
		Started: func(ctx context.Context, _ *util.FleetEnv) error {
			if err := serveTargetFlavors(ctx); err != nil {
				return fmt.Errorf("target flavors: %w", err)
			}
			if err := applyShippedRuntimes(ctx); err != nil {
				return fmt.Errorf("apply Kubeflow's runtimes: %w", err)
			}
			return nil
		},
	})
}

// setUpSpokes makes, on each spoke (whose 4 kwok nodes of 4 GPUs the suite
// adds), the ServiceAccounts Trainer's data cache and its runtime-patches
// example run as, in the tenant's namespace (which the Targets allow).
func setUpSpokes(ctx context.Context) error {
	for _, s := range env.fleet.Spokes {
		ns := kubework.TenantNamespace(spokeNamespace, tenant)
		if err := s.EnsureNamespace(ctx, ns); err != nil {
			return err
		}
		for _, name := range []string{cacheInitializerSA, exampleSA} {
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
			if err := s.Client.Create(ctx, sa); client.IgnoreAlreadyExists(err) != nil {
				return err
			}
		}
	}
	return nil
}

// spokeNodes are the 4 kwok nodes of 4 GPUs of spoke.
func spokeNodes(spoke string) []kube.NodeSpec {
	var nodes []kube.NodeSpec
	for i := range 4 {
		// Trainer's runtime-patches example selects nodes labelled
		// node-type=training: a site running it labels some.
		nodes = append(nodes, kube.NodeSpec{Name: fmt.Sprintf("%s-gpu-%d", spoke, i), GPUs: 4,
			Labels: map[string]string{exampleNodeLabel: "training"}})
	}
	return nodes
}

// setUpQueues makes the any-target queue, the spokes' queue and one queue
// per target, whose flavor covers CPU, memory and GPUs and is served by
// that target only.
func setUpQueues(ctx context.Context) error {
	h := env.fleet.Hub
	if err := trainyard.SetUpQueue(ctx, h, trainyard.Queue{ClusterQueue: "cq-any", Namespace: tenant,
		LocalQueue: anyQueue, Flavor: anyFlavor, GPUs: "256"}); err != nil {
		return err
	}
	var nodes []kube.NodeSpec
	for _, s := range env.fleet.Spokes {
		nodes = append(nodes, spokeNodes(s.Name)...)
	}
	if err := trainyard.SetUpQueue(ctx, h, trainyard.QueueFor(trainyard.Queue{ClusterQueue: "cq-spokes", Namespace: tenant,
		LocalQueue: spokesQueue, Flavor: spokesFlavor}, kube.Capacity(nodes...))); err != nil {
		return err
	}
	for _, t := range targets {
		f := flavorOf(t.name)
		objs := []client.Object{
			kueuetesting.MakeResourceFlavor(f).Obj(),
			kueuetesting.MakeClusterQueue("cq-" + t.name).ResourceGroup(*kueuetesting.MakeFlavorQuotas(f).
				Resource(corev1.ResourceCPU, "1000").Resource(corev1.ResourceMemory, "4Ti").
				Resource(v1alpha1.GPUResource, "256").Obj()).
				AdmissionChecks(trainyard.CheckName).Obj(),
			kueuetesting.MakeLocalQueue(queueOf(t.name), tenant).ClusterQueue("cq-" + t.name).Obj(),
		}
		for _, o := range objs {
			if err := h.Client.Create(ctx, o); client.IgnoreAlreadyExists(err) != nil {
				return err
			}
		}
	}
	return nil
}

// serveTargetFlavors adds each target's own flavor to the ones it serves,
// and the spokes' flavor to each spoke's.
func serveTargetFlavors(ctx context.Context) error {
	for _, t := range targets {
		var tg v1alpha1.Target
		if err := env.fleet.Hub.Client.Get(ctx, client.ObjectKey{Name: t.name}, &tg); err != nil {
			return err
		}
		patch := client.MergeFrom(tg.DeepCopy())
		tg.Spec.Flavors = []string{anyFlavor, flavorOf(t.name)}
		if t.kind != "Slurm" {
			tg.Spec.Flavors = append(tg.Spec.Flavors, spokesFlavor)
		}
		if t.kind == "Slurm" {
			// Without containers it can run only jobs that name a command
			// its nodes have: the administrator keeps it for jobs of its
			// own flavors, which ask for its resources.
			tg.Spec.FlavorlessJobs = v1alpha1.FlavorlessJobsDeny
		}
		if err := env.fleet.Hub.Client.Patch(ctx, &tg, patch); err != nil {
			return err
		}
	}
	return nil
}

// applyShippedRuntimes creates every ClusterTrainingRuntime under the
// pinned Trainer module's manifests/base/runtimes, unchanged (decoded
// strictly, so no field is dropped on the way).
func applyShippedRuntimes(ctx context.Context) error {
	rts, err := runtimesUnderTest()
	if err != nil {
		return err
	}
	for path, rt := range rts {
		if err := env.fleet.Hub.Client.Create(ctx, rt); client.IgnoreAlreadyExists(err) != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return nil
}

// runtimesUnderTest are the runtimes Kubeflow installs and the Flux runtime
// of its examples (Trainer ships Flux only there).
func runtimesUnderTest() (map[string]*trainer.ClusterTrainingRuntime, error) {
	rts, err := tytesting.AllShippedRuntimes()
	if err != nil {
		return nil, err
	}
	flux, err := tytesting.ShippedRuntime(tytesting.TrainerFluxRuntime)
	if err != nil {
		return nil, err
	}
	rts[tytesting.TrainerFluxRuntime] = flux
	return rts, nil
}

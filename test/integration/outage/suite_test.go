// Package outage takes the hub's control plane away while jobs run, with
// production lease settings (a 40 s lease, 15 min fence-after, Targets
// that say leaseLoss Requeue): the hub's kube-apiserver frozen (SIGSTOP)
// for five minutes, then its etcd stopped and started again. Every agent
// loses its lease on the hub; none may stop or restart what runs. A kwok
// JobSet spoke and a real Slurm cluster (harness instance 4) run one job
// each; watches on the spoke and a slurmrestd poll started before the
// outage record every deletion, new copy and state change, and the jobs'
// own processes write when they start and end.
package outage

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/slurm"
	trainyard "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/controllers"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	hslurm "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/slurm"
	"github.com/trainyard-dev/trainyard/test/util"
)

const (
	tenant = "team-a"
	// kubeQueue's flavor is served by the spoke, hpcQueue's by Slurm.
	kubeQueue, kubeFlavor = "lq-kube", "gpu"
	hpcQueue, hpcFlavor   = "lq-hpc", "hpc-gpu"
	hpcTarget             = "hpc"
	slurmUser             = "alice"
	gpusPerNode           = 4
	spokes, nodesPerSpoke = 1, 2
	// slurmGPUs: the harness cluster has 4 nodes of 4 GPUs.
	slurmGPUs = 16
	// workDir is the Slurm Target's spec.slurm.workDir; the jobs write
	// their start and end stamps into alice's.
	workDir = "/scratch/%u/trainyard"
	// slurmInstance is this suite's harness Slurm cluster: the other
	// suites use 0-3, a sandbox beside make test 5 and 6.
	slurmInstance = 4
)

var env struct {
	fleet   *kube.Fleet
	cluster *hslurm.Cluster
	rest    *slurm.Client
	// etcds are hub etcd processes a test started again after stopping
	// envtest's; they outlive the test, and stop after the hub.
	etcds []*exec.Cmd
}

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("skipping hub outage tests in -short mode")
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	// The Slurm start may wait for the instance's lock; the rest has 5 minutes.
	slurmCtx, slurmCancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer slurmCancel()
	slurmDone := make(chan error, 1)
	go func() {
		var err error
		env.cluster, err = hslurm.Start(slurmCtx, hslurm.Options{Instance: slurmInstance})
		slurmDone <- err
	}()
	// slurmUp waits for the Slurm start that runs beside the fleet's.
	slurmUp := sync.OnceValue(func() error { return <-slurmDone })
	defer func() {
		if slurmUp() != nil {
			return
		}
		if err := env.cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: stop Slurm cluster:", err)
			code = 1
		}
	}()
	defer stopEtcds() // after the hub
	// No LeaseDuration, LeaseGrace, LeaseRenewInterval or FenceAfter: the
	// hub and the agents run with the defaults a release ships (40 s
	// lease renewed every 10 s, 15 min fence-after) and the Targets with
	// the API's leaseLoss, Requeue. The other paces only make the test
	// see changes sooner.
	opts := trainyard.Options{
		Flavor: kubeFlavor, HeartbeatInterval: time.Second, FenceInterval: 2 * time.Second, Resync: 5 * time.Second,
		Slurm: []trainyard.SlurmTarget{{
			Name: hpcTarget, APIVersion: "v0.0.42", PollInterval: time.Second,
			Partitions: []v1alpha1.SlurmPartition{{Flavor: hpcFlavor, Partition: "gpu"}},
			Accounts:   []v1alpha1.SlurmAccount{{Namespace: tenant, User: slurmUser}},
			WorkDir:    workDir,
		}},
	}
	return util.RunFleetSuite(m, util.FleetSuite{
		Fleet:      kube.FleetOptions{Spokes: spokes},
		Timeout:    5 * time.Minute,
		LogFile:    "trainyard-outage-controllers.log",
		Nodes:      func(s *kube.Cluster) []kube.NodeSpec { return util.KwokNodes(s, nodesPerSpoke, gpusPerNode) },
		NodesReady: true,
		Queues: []trainyard.Queue{
			{ClusterQueue: "cq-kube", Namespace: tenant, LocalQueue: kubeQueue, Flavor: kubeFlavor,
				GPUs: strconv.Itoa(spokes * nodesPerSpoke * gpusPerNode)},
			{ClusterQueue: "cq-hpc", Namespace: tenant, LocalQueue: hpcQueue, Flavor: hpcFlavor, GPUs: strconv.Itoa(slurmGPUs)},
		},
		SetUp: func(ctx context.Context, e *util.FleetEnv) error {
			env.fleet = e.Fleet
			if err := slurmUp(); err != nil {
				return fmt.Errorf("start Slurm: %w", err)
			}
			opts.Slurm[0].Cluster = env.cluster
			return setUpSlurm(ctx)
		},
		Options: &opts,
	})
}

// setUpSlurm makes the REST client and the Slurm users' work folders.
func setUpSlurm(ctx context.Context) (err error) {
	if env.rest, err = env.cluster.RESTClient("v0.0.42"); err != nil {
		return fmt.Errorf("slurmrestd client: %w", err)
	}
	if err := env.cluster.MakeWorkDirs(ctx, workDir, slurmUser); err != nil {
		return fmt.Errorf("make work directories: %w", err)
	}
	return nil
}

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
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

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
	nodesPerSpoke         = 2
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
	ctrl.SetLogger(zap.New(zap.WriteTo(util.LogSink("trainyard-outage-controllers.log")), zap.UseDevMode(true)))
	// The Slurm start may wait for the instance's lock; the rest has 5 minutes.
	slurmCtx, slurmCancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer slurmCancel()
	slurmDone := make(chan error, 1)
	go func() {
		var err error
		env.cluster, err = hslurm.Start(slurmCtx, hslurm.Options{Instance: slurmInstance})
		slurmDone <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f, fleetErr := kube.StartFleet(ctx, kube.FleetOptions{Spokes: 1, Dir: os.Getenv("TRAINYARD_ARTIFACTS")})
	if err := <-slurmDone; err != nil {
		fmt.Fprintln(os.Stderr, "start Slurm:", err)
		if f != nil {
			_ = f.Stop()
		}
		return 1
	}
	defer func() {
		if err := env.cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: stop Slurm cluster:", err)
			code = 1
		}
	}()
	if fleetErr != nil {
		fmt.Fprintln(os.Stderr, "start fleet:", fleetErr)
		return 1
	}
	env.fleet = f
	var controllers *trainyard.Controllers
	defer func() {
		if controllers != nil {
			controllers.Stop()
		}
		util.DumpLogsOnFailure(code, append([]*kube.Cluster{f.Hub}, f.Spokes...)...)
		_ = f.Stop()
		stopEtcds()
	}()
	if controllers, code = setUp(ctx); code != 0 {
		return code
	}
	return m.Run()
}

// setUp makes the spoke's nodes, the Slurm users' work folders and the
// queues, and starts trainyard with production lease settings.
func setUp(ctx context.Context) (*trainyard.Controllers, int) {
	var err error
	if env.rest, err = env.cluster.RESTClient("v0.0.42"); err != nil {
		fmt.Fprintln(os.Stderr, "slurmrestd client:", err)
		return nil, 1
	}
	if err := env.cluster.MakeWorkDirs(ctx, workDir, slurmUser); err != nil {
		fmt.Fprintln(os.Stderr, "make work directories:", err)
		return nil, 1
	}
	for _, s := range env.fleet.Spokes {
		var nodes []kube.NodeSpec
		for i := range nodesPerSpoke {
			nodes = append(nodes, kube.NodeSpec{Name: fmt.Sprintf("%s-gpu-%d", s.Name, i), GPUs: gpusPerNode})
		}
		if _, err := util.SetUpSpoke(ctx, s, nodes); err != nil {
			fmt.Fprintln(os.Stderr, "set up spoke:", err)
			return nil, 1
		}
	}
	h := env.fleet.Hub
	for _, q := range []trainyard.Queue{
		{ClusterQueue: "cq-kube", Namespace: tenant, LocalQueue: kubeQueue, Flavor: kubeFlavor,
			GPUs: strconv.Itoa(len(env.fleet.Spokes) * nodesPerSpoke * gpusPerNode)},
		{ClusterQueue: "cq-hpc", Namespace: tenant, LocalQueue: hpcQueue, Flavor: hpcFlavor, GPUs: strconv.Itoa(slurmGPUs)},
	} {
		if err := trainyard.SetUpQueue(ctx, h, q); err != nil {
			fmt.Fprintln(os.Stderr, "set up queues:", err)
			return nil, 1
		}
	}
	// No LeaseDuration, LeaseGrace, LeaseRenewInterval or FenceAfter: the
	// hub and the agents run with the defaults a release ships (40 s
	// lease renewed every 10 s, 15 min fence-after) and the Targets with
	// the API's leaseLoss, Requeue. The other paces only make the test
	// see changes sooner.
	c, err := trainyard.Start(ctx, env.fleet, trainyard.Options{
		Flavor: kubeFlavor, HeartbeatInterval: time.Second, FenceInterval: 2 * time.Second, Resync: 5 * time.Second,
		Slurm: []trainyard.SlurmTarget{{
			Name: hpcTarget, Cluster: env.cluster, APIVersion: "v0.0.42", PollInterval: time.Second,
			Partitions: []v1alpha1.SlurmPartition{{Flavor: hpcFlavor, Partition: "gpu"}},
			Accounts:   []v1alpha1.SlurmAccount{{Namespace: tenant, User: slurmUser}},
			WorkDir:    workDir,
		}},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start trainyard:", err)
		return nil, 1
	}
	return c, 0
}

// Package chaos runs trainyard's hub and agents as separate OS processes
// (cmd/trainyard-hub, cmd/trainyard-agent, built once by the suite) as the
// charts run them: leader election on, two hub replicas and two replicas
// of each agent, beside a hub with Kueue, two kwok JobSet spokes and the
// harness Slurm cluster. A kube agent's replicas elect their leader on
// their own spoke, the Slurm agent's on the hub. During a burst of 100
// TrainJobs a monkey kills random processes with SIGKILL and restarts each
// after a random delay.
//
// The spokes' Targets requeue a lost target's jobs (leaseLoss: Requeue),
// safe now that an agent has a second replica to stop its work; Slurm
// holds them (Hold). The lease is short (6 s) so that kills put targets in
// lease loss, where they take no new work. The fence deadline (agents'
// --fence-after, the hub's --agent-fence-after) is 60 s, longer than any
// time without renewals the monkey makes: a candidate waits out the whole
// election lock (15 s on a spoke, 26 s for Slurm's on the hub) from its
// own start, so a killed leader whose standby is killed too leaves a
// spoke's target without renewals for up to about 50 s (measured; restarts
// come within 10 s; Slurm's, which holds its jobs, went 97 s once). So no
// job restarts in the burst, and the targeted tests that cross the
// deadline still fit the suite in about 8 minutes. The
// grace (10 s) gives a cut-off agent that stopped its work at the deadline
// time to renew before the hub would requeue.
//
// Watches started before each test record every remote copy (JobSet UIDs
// on each spoke API server, Slurm job ids by comment) and every renewal of
// the agents' Leases. The burst asserts that no job ever has two live
// copies, that every TrainJob succeeded exactly once, and that none
// restarted (attempt > 1) unless its target really went without a
// renewal for the fence deadline. Targeted tests kill every replica of an
// agent, cut an agent off the hub, and check Hold and outOfService.
package chaos

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/slurm"
	trainyard "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/controllers"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	hslurm "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/slurm"
	"github.com/trainyard-dev/trainyard/test/harness/netproxy"
	"github.com/trainyard-dev/trainyard/test/harness/procs"
	"github.com/trainyard-dev/trainyard/test/util"
)

const (
	tenant = "team-a"
	// kubeQueue's flavor is served by both spokes, hpcQueue's by Slurm.
	kubeQueue, kubeFlavor = "lq-kube", "gpu"
	hpcQueue, hpcFlavor   = "lq-hpc", "hpc-gpu"
	hpcTarget             = "hpc"
	slurmUser             = "alice"
	gpusPerNode           = 4
	nodesPerSpoke         = 4
	// slurmGPUs: the harness cluster has 4 nodes of 4 GPUs.
	slurmGPUs = 16
	// The lease, the fence deadline and the grace: see the package comment.
	leaseDuration = 6 * time.Second
	fenceAfter    = 60 * time.Second
	leaseGrace    = 10 * time.Second
	renewEvery    = time.Second
	// evidenceLag bounds how much earlier than the last renewal the test
	// saw an agent's own evidence of it may be: a standby's is the send
	// time of the read before the one that showed the renewal, and calls
	// take their time on a loaded machine. An agent may stop its work
	// once fenceAfter - evidenceLag passed without a renewal seen here.
	evidenceLag = 5 * renewEvery
	// slurmKillWait is the harness cluster's KillWait (hack/slurm).
	slurmKillWait = 5
	// slurmInstance is the harness Slurm cluster of this suite, apart from
	// the default one other suites share (slurmpair runs 1 and 2).
	slurmInstance = 3
)

var env struct {
	fleet   *kube.Fleet
	cluster *hslurm.Cluster
	rest    *slurm.Client
	// procs are the hub and agent replicas, by name ("hub-1",
	// "agent-spoke1-2", ...).
	procs map[string]*procs.Process
	// names lists procs in a fixed order, for seeded choices.
	names []string
	// cut holds each target's proxy between its agents and the hub.
	cut        map[string]*netproxy.Proxy
	metricsURL string
}

func TestMain(m *testing.M) {
	flag.Parse()
	// The recorders' caches log nothing worth reading.
	ctrllog.SetLogger(logr.Discard())
	if testing.Short() {
		fmt.Println("skipping chaos tests in -short mode")
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	// One Slurm cluster runs per machine: the start may wait for another
	// suite's to end, so only what follows it has 5 minutes.
	slurmCtx, slurmCancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer slurmCancel()
	dir := os.Getenv("TRAINYARD_ARTIFACTS")
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "trainyard-chaos-"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() {
			if code != 0 {
				// The whole hub and agent logs, for the failure's story.
				fmt.Fprintf(os.Stderr, "chaos artifacts kept in %s\n", dir)
				return
			}
			os.RemoveAll(dir)
		}()
	}
	// The binaries build while the clusters start.
	buildDone := make(chan built, 1)
	go func() {
		t0 := time.Now()
		bins, err := procs.Build(slurmCtx, filepath.Join(dir, "bin"), "./cmd/trainyard-hub", "./cmd/trainyard-agent")
		fmt.Printf("built trainyard-hub and trainyard-agent in %v\n", time.Since(t0).Round(100*time.Millisecond))
		buildDone <- built{bins, err}
	}()
	var err error
	if env.cluster, err = hslurm.Start(slurmCtx, hslurm.Options{Instance: slurmInstance}); err != nil {
		fmt.Fprintln(os.Stderr, "start Slurm:", err)
		return 1
	}
	defer func() {
		if err := env.cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: stop Slurm cluster:", err)
			code = 1
		}
	}()
	if env.rest, err = env.cluster.RESTClient("v0.0.42"); err != nil {
		fmt.Fprintln(os.Stderr, "slurmrestd client:", err)
		return 1
	}
	env.procs, env.cut = map[string]*procs.Process{}, map[string]*netproxy.Proxy{}
	// life bounds what serves the processes for the whole run: the hub's
	// webhook front door.
	life, endLife := context.WithCancel(context.Background())
	defer endLife()
	return util.RunFleetSuite(m, util.FleetSuite{
		Fleet:   kube.FleetOptions{Spokes: 2, Dir: filepath.Join(dir, "clusters")},
		Timeout: 5 * time.Minute,
		// TestMain discards the recorders' logs; trainyard runs as processes.
		KeepLogger: true,
		Nodes:      func(s *kube.Cluster) []kube.NodeSpec { return util.KwokNodes(s, nodesPerSpoke, gpusPerNode) },
		NodesReady: true,
		// One ClusterQueue for the spokes' flavor and one for Slurm's, each
		// with as much quota as its targets have GPUs, so jobs wait in
		// Kueue rather than in placement.
		Queues: []trainyard.Queue{
			{ClusterQueue: "cq-kube", Namespace: tenant, LocalQueue: kubeQueue, Flavor: kubeFlavor,
				GPUs: strconv.Itoa(2 * nodesPerSpoke * gpusPerNode)},
			{ClusterQueue: "cq-hpc", Namespace: tenant, LocalQueue: hpcQueue, Flavor: hpcFlavor, GPUs: strconv.Itoa(slurmGPUs)},
		},
		SetUp: func(ctx context.Context, e *util.FleetEnv) error {
			env.fleet = e.Fleet
			return startProcesses(ctx, life, dir, buildDone)
		},
		Teardown: func(code int) {
			for _, p := range env.procs {
				p.Stop(5 * time.Second)
			}
			endLife()
			for _, p := range env.cut {
				_ = p.Close()
			}
			if code != 0 {
				for _, name := range env.names {
					p := env.procs[name]
					fmt.Fprintf(os.Stderr, "----- %s (%s) -----\n%s\n", name, p.LogPath, p.LogTail(6000))
				}
			}
		},
	})
}

// built is the hub and agent binaries, or why they did not build.
type built struct {
	bins map[string]string
	err  error
}

// startProcesses registers the targets, then starts the hub and agent
// replicas once their binaries are built, and waits until every target's
// agent holds its lease.
func startProcesses(ctx, life context.Context, dir string, buildDone <-chan built) error {
	o := trainyard.Options{
		Flavor: kubeFlavor, LeaseDuration: leaseDuration, FenceAfter: fenceAfter, LeaseGrace: leaseGrace, LeaseRenewInterval: renewEvery,
		HeartbeatInterval: time.Second, FenceInterval: 2 * time.Second, Resync: 2 * time.Second,
		Slurm: []trainyard.SlurmTarget{{
			Name: hpcTarget, Cluster: env.cluster, APIVersion: "v0.0.42", PollInterval: time.Second,
			Partitions: []v1alpha1.SlurmPartition{{Flavor: hpcFlavor, Partition: "gpu"}},
			Accounts:   []v1alpha1.SlurmAccount{{Namespace: tenant, User: slurmUser}},
		}},
	}
	reg, err := trainyard.Register(ctx, env.fleet, o)
	if err != nil {
		return fmt.Errorf("register targets: %w", err)
	}
	env.metricsURL = reg.MetricsURL
	if err := setLeaseLoss(ctx); err != nil {
		return fmt.Errorf("targets: %w", err)
	}
	b := <-buildDone
	if b.err != nil {
		return b.err
	}
	if err := makeProcesses(life, dir, b.bins, reg, o); err != nil {
		return fmt.Errorf("processes: %w", err)
	}
	for _, name := range env.names {
		if err := env.procs[name].Start(); err != nil {
			return err
		}
	}
	return waitAvailable(ctx)
}

// setLeaseLoss makes the spokes' Targets requeue a lost target's jobs
// (Requeue) and Slurm's hold them (Hold), and states the harness Slurm
// cluster's KillWait on its Target (its agent's stop bound). A merge patch
// of the field by name: an API without it drops it.
func setLeaseLoss(ctx context.Context) error {
	var list v1alpha1.TargetList
	if err := env.fleet.Hub.Client.List(ctx, &list); err != nil {
		return err
	}
	for i := range list.Items {
		t := &list.Items[i]
		patch := fmt.Sprintf(`{"spec":{"leaseLoss":%q}}`, v1alpha1.LeaseLossRequeue)
		if t.Spec.Slurm != nil {
			patch = fmt.Sprintf(`{"spec":{"leaseLoss":%q,"slurm":{"killWaitSeconds":%d}}}`, v1alpha1.LeaseLossHold, slurmKillWait)
		}
		if err := env.fleet.Hub.Client.Patch(ctx, t, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			return fmt.Errorf("target %s: %w", t.Name, err)
		}
	}
	return nil
}

// waitAvailable waits until every Target's agent holds its lease.
func waitAvailable(ctx context.Context) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var list v1alpha1.TargetList
		err := env.fleet.Hub.Client.List(ctx, &list)
		ready := 0
		for _, t := range list.Items {
			for _, c := range t.Status.Conditions {
				if c.Type == v1alpha1.TargetAvailable && c.Status == "True" {
					ready++
				}
			}
		}
		if err == nil && ready == 3 && len(list.Items) == 3 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("targets not available after 2 minutes (%d of %d, %v)", ready, len(list.Items), err)
		}
		for _, p := range env.procs {
			if c := p.Crashes(); len(c) > 0 {
				return fmt.Errorf("%s", c[0])
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// clusterQueuesIdle fails unless no ClusterQueue holds quota or workloads.
func clusterQueuesIdle(ctx context.Context) error {
	for _, name := range []string{"cq-kube", "cq-hpc"} {
		var cq kueue.ClusterQueue
		if err := env.fleet.Hub.Client.Get(ctx, client.ObjectKey{Name: name}, &cq); err != nil {
			return err
		}
		if cq.Status.ReservingWorkloads != 0 || cq.Status.AdmittedWorkloads != 0 {
			return fmt.Errorf("%s: %d reserving, %d admitted workloads", name, cq.Status.ReservingWorkloads, cq.Status.AdmittedWorkloads)
		}
		for _, usage := range [][]kueue.FlavorUsage{cq.Status.FlavorsReservation, cq.Status.FlavorsUsage} {
			for _, f := range usage {
				for _, r := range f.Resources {
					if !r.Total.IsZero() {
						return fmt.Errorf("%s: flavor %s holds %s of %s", name, f.Name, r.Total.String(), r.Name)
					}
				}
			}
		}
	}
	return nil
}

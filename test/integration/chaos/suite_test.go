// Package chaos runs trainyard's hub and agents as separate OS processes
// (cmd/trainyard-hub, cmd/trainyard-agent, built once by the suite) beside
// a hub with Kueue, two kwok JobSet spokes and the harness Slurm cluster,
// and kills a random one of them with SIGKILL at random moments during a
// burst of TrainJobs, restarting it after a random delay, some longer than
// lease + grace. Every Target holds its jobs when its lease is lost
// (leaseLoss: Hold), the one policy that is safe when an agent dies. Watches
// started before the burst record every remote copy (JobSet UIDs on each
// spoke API server, Slurm job ids by comment); the test asserts that no job
// ever has two live copies, that every TrainJob ran exactly once (a second
// copy only after its agent stopped the first for want of a lease), that
// none is lost, and that no quota is held at the end. Targeted tests kill
// one agent for good and check Hold and outOfService.
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

	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/slurm"
	"github.com/trainyard-dev/trainyard/test/harness/kube"
	"github.com/trainyard-dev/trainyard/test/harness/procs"
	hslurm "github.com/trainyard-dev/trainyard/test/harness/slurm"
	"github.com/trainyard-dev/trainyard/test/harness/trainyard"
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
	// The lease is short so that a killed agent's jobs are requeued within
	// the burst; the grace covers the agent's stop and one renew interval.
	leaseDuration = 6 * time.Second
	leaseGrace    = 4 * time.Second
	renewEvery    = time.Second
	// slurmInstance is the harness Slurm cluster of this suite, apart from
	// the default one other suites share (slurmpair runs 1 and 2).
	slurmInstance = 3
)

var env struct {
	fleet   *kube.Fleet
	cluster *hslurm.Cluster
	rest    *slurm.Client
	// procs are the hub and the agents, by name ("hub", "agent-spoke1", ...).
	procs map[string]*procs.Process
	// names lists procs in a fixed order, for seeded choices.
	names      []string
	metricsURL string
}

func TestMain(m *testing.M) {
	flag.Parse()
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
	type built struct {
		bins map[string]string
		err  error
	}
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if env.rest, err = env.cluster.RESTClient("v0.0.42"); err != nil {
		fmt.Fprintln(os.Stderr, "slurmrestd client:", err)
		return 1
	}
	if env.fleet, err = kube.StartFleet(ctx, kube.FleetOptions{Spokes: 2, Dir: filepath.Join(dir, "clusters")}); err != nil {
		fmt.Fprintln(os.Stderr, "start fleet:", err)
		return 1
	}
	env.procs = map[string]*procs.Process{}
	defer func() {
		for _, p := range env.procs {
			p.Stop(5 * time.Second)
		}
		if code != 0 {
			for _, name := range env.names {
				p := env.procs[name]
				fmt.Fprintf(os.Stderr, "----- %s (%s) -----\n%s\n", name, p.LogPath, p.LogTail(6000))
			}
		}
		util.DumpLogsOnFailure(code, append([]*kube.Cluster{env.fleet.Hub}, env.fleet.Spokes...)...)
		_ = env.fleet.Stop()
	}()
	for _, s := range env.fleet.Spokes {
		var nodes []kube.NodeSpec
		for i := range nodesPerSpoke {
			nodes = append(nodes, kube.NodeSpec{Name: fmt.Sprintf("%s-gpu-%d", s.Name, i), GPUs: gpusPerNode})
		}
		if _, err := util.SetUpSpoke(ctx, s, nodes); err != nil {
			fmt.Fprintln(os.Stderr, "set up spoke:", err)
			return 1
		}
	}
	if err := setUpQueues(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "set up queues:", err)
		return 1
	}
	o := trainyard.Options{
		Flavor: kubeFlavor, LeaseDuration: leaseDuration, LeaseGrace: leaseGrace, LeaseRenewInterval: renewEvery,
		HeartbeatInterval: time.Second, FenceInterval: 2 * time.Second, Resync: 2 * time.Second,
		Slurm: []trainyard.SlurmTarget{{
			Name: hpcTarget, Cluster: env.cluster, APIVersion: "v0.0.42", PollInterval: time.Second,
			Partitions: []v1alpha1.SlurmPartition{{Flavor: hpcFlavor, Partition: "gpu"}},
			Accounts:   []v1alpha1.SlurmAccount{{Namespace: tenant, User: slurmUser}},
		}},
	}
	reg, err := trainyard.Register(ctx, env.fleet, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "register targets:", err)
		return 1
	}
	env.metricsURL = reg.MetricsURL
	if err := holdOnLeaseLoss(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "targets:", err)
		return 1
	}
	b := <-buildDone
	if b.err != nil {
		fmt.Fprintln(os.Stderr, b.err)
		return 1
	}
	if err := makeProcesses(dir, b.bins, reg, o); err != nil {
		fmt.Fprintln(os.Stderr, "processes:", err)
		return 1
	}
	for _, name := range env.names {
		if err := env.procs[name].Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if err := waitAvailable(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// makeProcesses writes each identity's kubeconfig and builds the hub's and
// each agent's command line from the registration, as the in-process
// harness configures them.
func makeProcesses(dir string, bins map[string]string, reg *trainyard.Registration, o trainyard.Options) error {
	kc := func(name string) string { return filepath.Join(dir, name+".kubeconfig") }
	if err := procs.WriteKubeconfig(kc("hub"), reg.HubConfig); err != nil {
		return err
	}
	h := reg.HubOptions
	add := func(name, bin string, args ...string) {
		env.procs[name] = procs.New(name, bin, filepath.Join(dir, name+".log"), args...)
		env.names = append(env.names, name)
	}
	add("hub", bins["trainyard-hub"], "--kubeconfig="+kc("hub"), "--leader-elect=false",
		"--metrics-bind-address="+h.MetricsAddr, "--health-probe-bind-address=0",
		"--webhook-host="+h.WebhookHost, "--webhook-port="+strconv.Itoa(h.WebhookPort), "--webhook-cert-dir="+h.WebhookCertDir,
		"--agent-lease-duration="+leaseDuration.String(), "--lost-target-grace="+leaseGrace.String())
	common := []string{"--leader-elect=false", "--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--heartbeat-interval=" + o.HeartbeatInterval.String(), "--fence-interval=" + o.FenceInterval.String(),
		"--resync-period=" + o.Resync.String(), "--lease-duration=" + leaseDuration.String(),
		"--lease-renew-interval=" + renewEvery.String()}
	for _, s := range env.fleet.Spokes {
		if err := procs.WriteKubeconfig(kc("agent-"+s.Name), reg.AgentConfigs[s.Name]); err != nil {
			return err
		}
		add("agent-"+s.Name, bins["trainyard-agent"], append([]string{"--target=" + s.Name, "--backend=kubernetes",
			"--hub-kubeconfig=" + kc("agent-"+s.Name), "--spoke-kubeconfig=" + s.Kubeconfig}, common...)...)
	}
	for _, st := range o.Slurm {
		if err := procs.WriteKubeconfig(kc("agent-"+st.Name), reg.AgentConfigs[st.Name]); err != nil {
			return err
		}
		add("agent-"+st.Name, bins["trainyard-agent"], append([]string{"--target=" + st.Name, "--backend=slurm",
			"--hub-kubeconfig=" + kc("agent-"+st.Name), "--slurm-poll-interval=" + st.PollInterval.String(),
			"--slurm-output-root=" + st.Cluster.Root}, common...)...)
	}
	return nil
}

// setUpQueues makes one ClusterQueue for the spokes' flavor and one for
// Slurm's, each with as much quota as its targets have GPUs, so jobs wait
// in Kueue rather than in placement.
func setUpQueues(ctx context.Context) error {
	h := env.fleet.Hub
	if err := trainyard.SetUpQueue(ctx, h, trainyard.Queue{ClusterQueue: "cq-kube", Namespace: tenant, LocalQueue: kubeQueue,
		Flavor: kubeFlavor, GPUs: strconv.Itoa(2 * nodesPerSpoke * gpusPerNode)}); err != nil {
		return err
	}
	return trainyard.SetUpQueue(ctx, h, trainyard.Queue{ClusterQueue: "cq-hpc", Namespace: tenant, LocalQueue: hpcQueue,
		Flavor: hpcFlavor, GPUs: strconv.Itoa(slurmGPUs)})
}

// holdOnLeaseLoss sets every Target's leaseLoss to Hold: a killed agent
// stops nothing, so only Hold keeps a job from running twice when one stays
// down past lease + grace (the partition suite tests Requeue, whose agents
// are alive and cut off).
func holdOnLeaseLoss(ctx context.Context) error {
	var list v1alpha1.TargetList
	if err := env.fleet.Hub.Client.List(ctx, &list); err != nil {
		return err
	}
	for i := range list.Items {
		t := &list.Items[i]
		patch := client.MergeFrom(t.DeepCopy())
		t.Spec.LeaseLoss = v1alpha1.LeaseLossHold
		if err := env.fleet.Hub.Client.Patch(ctx, t, patch); err != nil {
			return err
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

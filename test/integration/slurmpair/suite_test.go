// Package slurmpair runs trainyard onto two real Slurm 24.11 clusters on
// one machine (harness instances 1 and 2: clones of the chroot with their
// own ClusterNames, ports, slurmdbd and keys; instance 0, which the other
// suites and the sandbox use, stays free), each registered as a Slurm
// Target serving the same flavor. It checks placement across them by free nodes, and that
// losing one of them sends work to the other without two copies of a job
// running: a cluster whose controller is down gets no new work, and an
// agent cut off from the hub past its fence deadline stops its Slurm jobs
// before the hub requeues them onto the other cluster, judged by the
// processes' own stamps of their lifetimes, not only by Slurm's job states.
package slurmpair

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/slurm"
	trainyard "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/controllers"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	hslurm "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/slurm"
	"github.com/trainyard-dev/trainyard/test/harness/netproxy"
	"github.com/trainyard-dev/trainyard/test/util"
)

const (
	flavor = "hpc-gpu"
	tenant = "team-a"
	queue  = "lq"
	// The lease is short so the cut-off test takes seconds; the grace
	// covers the agent's scancel and one renew interval.
	leaseDuration = 6 * time.Second
	leaseGrace    = 4 * time.Second
	renewEvery    = time.Second
	// aliceUID is the harness clusters' alice (hack/slurm/configure.sh),
	// whom tenant's jobs run as.
	aliceUID = 2001
)

// site is one Slurm cluster and its Target.
type site struct {
	target  string
	cluster *hslurm.Cluster
	rest    *slurm.Client
	proxy   *netproxy.Proxy
}

var env struct {
	fleet *kube.Fleet
	sites []*site
}

// siteOf returns the site of a Target.
func siteOf(target string) *site {
	for _, s := range env.sites {
		if s.target == target {
			return s
		}
	}
	panic("no site " + target)
}

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("skipping two-cluster Slurm tests in -short mode")
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	defer func() {
		for _, s := range env.sites {
			if s.proxy != nil {
				_ = s.proxy.Close()
			}
			if err := s.cluster.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "FAIL: stop Slurm cluster %s: %v\n", s.cluster.Name, err)
				code = 1
			}
		}
	}()
	opts := trainyard.Options{
		Flavor: flavor, LeaseDuration: leaseDuration, LeaseGrace: leaseGrace, LeaseRenewInterval: renewEvery,
		HeartbeatInterval: time.Second, FenceInterval: 2 * time.Second, Resync: 2 * time.Second,
		// Each agent reaches the hub through a proxy the test can pause.
		AgentHubConfig: func(target string, cfg *rest.Config) *rest.Config {
			cfg.Host = "https://" + siteOf(target).proxy.Addr()
			return cfg
		},
	}
	for i, target := range []string{"hpc-a", "hpc-b"} {
		cl, err := hslurm.Start(ctx, hslurm.Options{Instance: i + 1})
		if err != nil {
			fmt.Fprintf(os.Stderr, "start Slurm instance %d: %v\n", i+1, err)
			return 1
		}
		s := &site{target: target, cluster: cl}
		env.sites = append(env.sites, s)
		if s.rest, err = cl.RESTClient("v0.0.42"); err != nil {
			fmt.Fprintln(os.Stderr, "slurmrestd client:", err)
			return 1
		}
		opts.Slurm = append(opts.Slurm, trainyard.SlurmTarget{
			Name: s.target, Cluster: s.cluster, APIVersion: "v0.0.42", PollInterval: time.Second,
			Partitions: []v1alpha1.SlurmPartition{{Flavor: flavor, Partition: "gpu"}},
			Accounts:   []v1alpha1.SlurmAccount{{Namespace: tenant, User: "alice"}},
		})
	}
	return util.RunFleetSuite(m, util.FleetSuite{
		Fleet:   kube.FleetOptions{HubOnly: true},
		Timeout: 5 * time.Minute,
		LogFile: "trainyard-slurmpair-controllers.log",
		Queues:  []trainyard.Queue{{ClusterQueue: "cq", Namespace: tenant, LocalQueue: queue, Flavor: flavor, GPUs: "32"}},
		SetUp: func(_ context.Context, e *util.FleetEnv) error {
			env.fleet = e.Fleet
			hubURL, err := url.Parse(e.Hub.Config.Host)
			if err != nil {
				return fmt.Errorf("hub address: %w", err)
			}
			for _, s := range env.sites {
				if s.proxy, err = netproxy.Start(hubURL.Host); err != nil {
					return fmt.Errorf("proxy: %w", err)
				}
			}
			return nil
		},
		Options: &opts,
	})
}

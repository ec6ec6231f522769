// Package partition cuts the network between agents and the hub API server
// (a TCP proxy the test pauses, holding every connection) and checks the
// lease protocol: a cut-off agent stops its work before the hub requeues
// it, so at no sample do pods of two attempts of a job exist, Terminating
// ones included (pods may take a kwok stop-for to go); a hub cut off from
// every agent requeues nothing (disruption mode); skewed agent clocks
// requeue nothing. Every agent's clock is skewed by minutes throughout.
package partition

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	trainyard "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/controllers"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/test/harness/netproxy"
	"github.com/trainyard-dev/trainyard/test/util"
)

const (
	flavor        = "gpu"
	tenant        = "team-a"
	queue         = "lq"
	gpusPerNode   = 4
	nodesPerSpoke = 2
	// The lease is short so a partition test takes seconds; the grace
	// covers the agent's stop and one renew interval.
	leaseDuration = 6 * time.Second
	leaseGrace    = 4 * time.Second
	renewEvery    = time.Second
)

// skew of each agent's clock against the hub's.
var skew = map[string]time.Duration{"spoke1": -5 * time.Minute, "spoke2": 5 * time.Minute}

var env *environment

type environment struct {
	fleet      *kube.Fleet
	proxies    map[string]*netproxy.Proxy
	metricsURL string
}

func TestMain(m *testing.M) {
	env = &environment{proxies: map[string]*netproxy.Proxy{}}
	clocks := map[string]clock.Clock{}
	os.Exit(util.RunFleetSuite(m, util.FleetSuite{
		Fleet:  kube.FleetOptions{Spokes: 2},
		Nodes:  func(s *kube.Cluster) []kube.NodeSpec { return util.KwokNodes(s, nodesPerSpoke, gpusPerNode) },
		Queues: []trainyard.Queue{{ClusterQueue: "cq", Namespace: tenant, LocalQueue: queue, Flavor: flavor, GPUs: "64"}},
		SetUp: func(_ context.Context, e *util.FleetEnv) error {
			env.fleet = e.Fleet
			return startProxies(e.Fleet, clocks)
		},
		Options: &trainyard.Options{
			Flavor: flavor, LeaseDuration: leaseDuration, LeaseGrace: leaseGrace, LeaseRenewInterval: renewEvery,
			HeartbeatInterval: time.Second, FenceInterval: 2 * time.Second, Resync: 2 * time.Second,
			AgentClocks: clocks,
			AgentHubConfig: func(target string, cfg *rest.Config) *rest.Config {
				cfg.Host = "https://" + env.proxies[target].Addr()
				return cfg
			},
		},
		Started: func(_ context.Context, e *util.FleetEnv) error {
			env.metricsURL = e.Controllers.MetricsURL
			return nil
		},
		Teardown: func(int) {
			for _, p := range env.proxies {
				_ = p.Close()
			}
		},
	}))
}

// startProxies starts each spoke's agent's proxy to the hub and gives it
// its skewed clock.
func startProxies(f *kube.Fleet, clocks map[string]clock.Clock) error {
	hubURL, err := url.Parse(f.Hub.Config.Host)
	if err != nil {
		return fmt.Errorf("hub address: %w", err)
	}
	for _, s := range f.Spokes {
		if env.proxies[s.Name], err = netproxy.Start(hubURL.Host); err != nil {
			return fmt.Errorf("proxy: %w", err)
		}
		clocks[s.Name] = skewedClock{offset: skew[s.Name]}
	}
	return nil
}

// skewedClock is the real clock moved by offset: the agent's timestamps
// are off, its durations are not.
type skewedClock struct {
	clock.RealClock
	offset time.Duration
}

func (c skewedClock) Now() time.Time                  { return time.Now().Add(c.offset) }
func (c skewedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

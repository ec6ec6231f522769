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
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

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
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	ctrl.SetLogger(zap.New(zap.WriteTo(util.LogSink("trainyard-controllers.log")), zap.UseDevMode(true)))
	ctx := context.Background()
	f, err := kube.StartFleet(ctx, kube.FleetOptions{Spokes: 2, Dir: os.Getenv("TRAINYARD_ARTIFACTS")})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start fleet:", err)
		return 1
	}
	env = &environment{fleet: f, proxies: map[string]*netproxy.Proxy{}}
	var controllers *trainyard.Controllers
	defer func() {
		if controllers != nil {
			controllers.Stop()
		}
		for _, p := range env.proxies {
			_ = p.Close()
		}
		util.DumpLogsOnFailure(code, append([]*kube.Cluster{f.Hub}, f.Spokes...)...)
		_ = f.Stop()
	}()
	hubURL, err := url.Parse(f.Hub.Config.Host)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hub address:", err)
		return 1
	}
	clocks := map[string]clock.Clock{}
	for _, s := range f.Spokes {
		if env.proxies[s.Name], err = netproxy.Start(hubURL.Host); err != nil {
			fmt.Fprintln(os.Stderr, "proxy:", err)
			return 1
		}
		clocks[s.Name] = skewedClock{offset: skew[s.Name]}
		var nodes []kube.NodeSpec
		for i := 0; i < nodesPerSpoke; i++ {
			nodes = append(nodes, kube.NodeSpec{Name: fmt.Sprintf("%s-gpu-%d", s.Name, i), GPUs: gpusPerNode})
		}
		if err := s.AddKwokNodes(ctx, nodes...); err != nil {
			fmt.Fprintln(os.Stderr, "add nodes:", err)
			return 1
		}
	}
	q := trainyard.Queue{ClusterQueue: "cq", Namespace: tenant, LocalQueue: queue, Flavor: flavor, GPUs: "64"}
	if err := trainyard.SetUpQueue(ctx, f.Hub, q); err != nil {
		fmt.Fprintln(os.Stderr, "set up queues:", err)
		return 1
	}
	controllers, err = trainyard.Start(ctx, f, trainyard.Options{
		Flavor: flavor, LeaseDuration: leaseDuration, LeaseGrace: leaseGrace, LeaseRenewInterval: renewEvery,
		HeartbeatInterval: time.Second, FenceInterval: 2 * time.Second, Resync: 2 * time.Second,
		AgentClocks: clocks,
		AgentHubConfig: func(target string, cfg *rest.Config) *rest.Config {
			cfg.Host = "https://" + env.proxies[target].Addr()
			return cfg
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start trainyard:", err)
		return 1
	}
	env.metricsURL = controllers.MetricsURL
	return m.Run()
}

// skewedClock is the real clock moved by offset: the agent's timestamps
// are off, its durations are not.
type skewedClock struct {
	clock.RealClock
	offset time.Duration
}

func (c skewedClock) Now() time.Time                  { return time.Now().Add(c.offset) }
func (c skewedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

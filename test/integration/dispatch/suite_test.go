// Package dispatch runs trainyard end to end on the harness: a hub with
// Kueue and trainyard's hub controllers, two Kubernetes spokes each with its
// agent, TrainJobs that run as JobSets on kwok GPU nodes.
package dispatch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	kueuetesting "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub"
	"github.com/trainyard-dev/trainyard/hub/admissioncheck"
	"github.com/trainyard-dev/trainyard/hub/snapshot"
	"github.com/trainyard-dev/trainyard/hub/targets"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/spoke"
	"github.com/trainyard-dev/trainyard/test/harness/kube"
	"github.com/trainyard-dev/trainyard/test/util"
)

const (
	flavor       = "gpu"
	tenant       = "team-a"
	queue        = "lq"
	gpusPerNode  = 4
	nodesPerSpke = 4
	// lostTimeout is short so the lost-agent test is quick; heartbeats come
	// every heartbeatEvery.
	lostTimeout    = 10 * time.Second
	heartbeatEvery = time.Second
)

var env *environment

type environment struct {
	fleet      *kube.Fleet
	hub        *component
	agents     map[string]*component
	agentCfg   map[string]*rest.Config
	metricsURL string
}

// component is a hub or agent manager the tests can stop and start again,
// as a crashed and restarted pod would be.
type component struct {
	name   string
	build  func(ctx context.Context) (ctrl.Manager, error)
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan error
}

// start starts the component unless it runs already. A manager that exits
// at once (its previous incarnation may still hold a listening port for a
// moment after stopping) is started again.
func (c *component) start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel != nil {
		return nil
	}
	var lastErr error
	for try := 0; try < 40; try++ {
		ctx, cancel := context.WithCancel(context.Background())
		mgr, err := c.build(ctx)
		if err != nil {
			cancel()
			return fmt.Errorf("build %s: %w", c.name, err)
		}
		done := make(chan error, 1)
		go func() { done <- mgr.Start(ctx) }()
		select {
		case lastErr = <-done:
			cancel()
			time.Sleep(250 * time.Millisecond)
			continue
		case <-time.After(time.Second):
		}
		c.cancel, c.done = cancel, done
		return nil
	}
	return fmt.Errorf("start %s: %w", c.name, lastErr)
}

func (c *component) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel == nil {
		return
	}
	c.cancel()
	<-c.done
	c.cancel = nil
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	ctrl.SetLogger(zap.New(zap.WriteTo(logSink()), zap.UseDevMode(true)))
	ctx := context.Background()
	f, err := kube.StartFleet(ctx, kube.FleetOptions{Spokes: 2, Dir: os.Getenv("TRAINYARD_ARTIFACTS")})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start fleet:", err)
		return 1
	}
	env = &environment{fleet: f, agents: map[string]*component{}, agentCfg: map[string]*rest.Config{}}
	defer func() {
		for _, a := range env.agents {
			a.stop()
		}
		if env.hub != nil {
			env.hub.stop()
		}
		util.DumpLogsOnFailure(code, append([]*kube.Cluster{f.Hub}, f.Spokes...)...)
		_ = f.Stop()
	}()
	if err := setUp(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "set up:", err)
		return 1
	}
	return m.Run()
}

func setUp(ctx context.Context) error {
	h := env.fleet.Hub
	for _, s := range env.fleet.Spokes {
		var nodes []kube.NodeSpec
		for i := 0; i < nodesPerSpke; i++ {
			nodes = append(nodes, kube.NodeSpec{
				Name: fmt.Sprintf("%s-gpu-%d", s.Name, i), GPUs: gpusPerNode,
				Labels: map[string]string{"topology.kubernetes.io/rack": fmt.Sprintf("rack-%d", i/2)},
			})
		}
		if err := s.AddKwokNodes(ctx, nodes...); err != nil {
			return err
		}
		if err := registerTarget(ctx, s.Name); err != nil {
			return err
		}
	}
	if err := setUpQueues(ctx, h.Client); err != nil {
		return err
	}
	port, err := kube.FreePort()
	if err != nil {
		return err
	}
	env.metricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	webhookPort, err := kube.FreePort()
	if err != nil {
		return err
	}
	certDir := filepath.Join(h.Dir, "trainyard-webhook-certs")
	ca, err := kube.ServingCert(certDir)
	if err != nil {
		return err
	}
	url := fmt.Sprintf("https://127.0.0.1:%d%s", webhookPort, snapshot.WebhookPath)
	policy, binding := snapshot.PinnedRuntimePolicy()
	for _, o := range []client.Object{snapshot.WebhookConfiguration(url, ca), policy, binding} {
		if err := h.Client.Create(ctx, o); err != nil {
			return err
		}
	}
	env.hub = &component{name: "hub", build: func(context.Context) (ctrl.Manager, error) {
		return hub.NewManager(h.Config, hub.ManagerOptions{
			MetricsAddr: fmt.Sprintf("127.0.0.1:%d", port), SkipNameValidation: true,
			WebhookHost: "127.0.0.1", WebhookPort: webhookPort, WebhookCertDir: certDir,
			Options: hub.Options{LostTargetTimeout: lostTimeout},
		})
	}}
	if err := env.hub.start(); err != nil {
		return err
	}
	for _, s := range env.fleet.Spokes {
		s := s
		a := &component{name: "agent-" + s.Name, build: func(ctx context.Context) (ctrl.Manager, error) {
			return spoke.NewKubernetesAgent(ctx, env.agentCfg[s.Name], spoke.KubernetesOptions{
				Target: s.Name, Spoke: s.Config, SkipNameValidation: true,
				Agent: spoke.Options{HeartbeatInterval: heartbeatEvery, FenceInterval: 2 * time.Second, Resync: 5 * time.Second},
			})
		}}
		env.agents[s.Name] = a
		if err := a.start(); err != nil {
			return err
		}
	}
	return nil
}

// registerTarget creates a spoke's Target, its agent namespace, and hub
// credentials for its agent that RBAC limits to what targets.AgentRBAC grants.
func registerTarget(ctx context.Context, name string) error {
	h := env.fleet.Hub
	t := tytesting.MakeKubernetesTarget(name, flavor).Kubernetes(&v1alpha1.KubernetesTarget{
		Namespace: "jobs", TopologyLevels: []string{"topology.kubernetes.io/rack"},
	}).Obj()
	if err := h.EnsureNamespace(ctx, t.Spec.Agent.Namespace); err != nil {
		return err
	}
	if err := h.Client.Create(ctx, t); err != nil {
		return err
	}
	user := "trainyard-agent:" + name
	for _, o := range targets.AgentRBAC(t, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}) {
		if err := h.Client.Create(ctx, o); err != nil {
			return err
		}
	}
	cfg, err := h.AddUser(user)
	if err != nil {
		return err
	}
	env.agentCfg[name] = cfg
	return nil
}

func setUpQueues(ctx context.Context, c client.Client) error {
	if err := env.fleet.Hub.EnsureNamespace(ctx, tenant); err != nil {
		return err
	}
	objs := []client.Object{
		kueuetesting.MakeAdmissionCheck("trainyard").ControllerName(admissioncheck.ControllerName).Obj(),
		kueuetesting.MakeResourceFlavor(flavor).Obj(),
		kueuetesting.MakeClusterQueue("cq").
			ResourceGroup(*kueuetesting.MakeFlavorQuotas(flavor).Resource("nvidia.com/gpu", "64").Obj()).
			AdmissionChecks("trainyard").Obj(),
		kueuetesting.MakeLocalQueue(queue, tenant).ClusterQueue("cq").Obj(),
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

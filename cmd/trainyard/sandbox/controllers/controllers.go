// Package controllers runs trainyard itself on a sandbox fleet: it registers
// each spoke as a Target with RBAC-limited agent credentials, installs the
// runtime-pinning webhook and, from config/, the admission policies and
// tenant roles on the hub, and runs the hub and one agent per spoke in this
// process, each stoppable and restartable as a crashed pod would be.
// Tests, benchmarks and `trainyard dev up` share it.
package controllers

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	hslurm "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/slurm"
	"github.com/trainyard-dev/trainyard/hub"
	"github.com/trainyard-dev/trainyard/hub/snapshot"
	"github.com/trainyard-dev/trainyard/hub/targets"
	"github.com/trainyard-dev/trainyard/spoke"
	"github.com/trainyard-dev/trainyard/spoke/statusapi"
)

// Options tune the controllers for a test's pace.
type Options struct {
	// Flavor every spoke serves, unless SpokeFlavors names one for it.
	Flavor string
	// SpokeFlavors maps spoke names to the flavor each serves.
	SpokeFlavors map[string]string
	// SpokeBackends maps spoke names to the workload API their Target
	// renders jobs into (default JobSet).
	SpokeBackends map[string]v1alpha1.KubernetesBackend
	// SpokeNamespace is the prefix of the spokes' tenant namespaces (default
	// "jobs"): a hub namespace's jobs go to kubework.TenantNamespace(it, ns).
	SpokeNamespace string
	// AllowedPodFields are the spoke Targets' spec.kubernetes.allowedPodFields,
	// with the kwok taint's key always among tolerationKeys (withKwokToleration).
	AllowedPodFields *v1alpha1.AllowedPodFields
	TopologyLevels   []string
	// LostTargetTimeout, when LeaseDuration is unset, is the agents' lease
	// duration, on the hub and in the agents alike.
	LostTargetTimeout time.Duration
	// LeaseDuration, LeaseGrace and LeaseRenewInterval: the agents' lease
	// (the hub's and the agents' duration are kept equal), the hub's grace
	// before a requeue, and the renewal pace (defaults if 0).
	LeaseDuration      time.Duration
	LeaseGrace         time.Duration
	LeaseRenewInterval time.Duration
	// FenceAfter: the agents of Requeue targets stop their running work
	// after this long without a renewal, and the hub requeues after it
	// (default: LeaseDuration when that is set, so a suite with a short
	// lease fails over as fast; else the production default).
	FenceAfter time.Duration
	// PinnedRuntimeGracePeriod of the hub's collector of pinned runtime
	// copies (default if 0).
	PinnedRuntimeGracePeriod time.Duration
	// DisruptionThreshold of the hub (default if 0).
	DisruptionThreshold float64
	// FenceMaxDeletes bounds the agents' fence passes (default if 0).
	FenceMaxDeletes int
	// AgentClocks give an agent its own clock, e.g. a skewed one.
	AgentClocks map[string]clock.Clock
	// AgentHubConfig, when set, rewrites an agent's hub credentials before
	// each start, e.g. to go through a proxy the test can cut.
	AgentHubConfig    func(target string, cfg *rest.Config) *rest.Config
	HeartbeatInterval time.Duration
	FenceInterval     time.Duration
	Resync            time.Duration
	// HubQPS and HubBurst are the hub's client rate limits (hub defaults if 0).
	HubQPS   float32
	HubBurst int
	// Slurm clusters registered as Slurm Targets, each with its agent.
	Slurm []SlurmTarget
	// SpokeStatus gives each spoke's agent a status endpoint on a loopback
	// port (Controllers.StatusAddrs) standing for its Service.
	SpokeStatus bool
}

// Names the spoke agents' status endpoints stand for (SpokeStatus).
const (
	StatusService   = "trainyard-agent-status"
	StatusNamespace = "trainyard-system"
	StatusPort      = 9443
)

// StatusAgentLabels are the spoke agents' pod labels (SpokeStatus).
var StatusAgentLabels = map[string]string{"app.kubernetes.io/name": "trainyard-agent"}

// SlurmTarget registers a harness Slurm cluster as a Target.
type SlurmTarget struct {
	Name    string
	Cluster *hslurm.Cluster
	// Partitions map flavors to partitions (default: Options.Flavor to "gpu").
	Partitions []v1alpha1.SlurmPartition
	// Accounts map hub namespaces to Slurm users; the harness cluster has
	// alice and bob.
	Accounts   []v1alpha1.SlurmAccount
	APIVersion v1alpha1.SlurmAPIVersion
	// PollInterval of the agent's job listing (agent default if 0).
	PollInterval time.Duration
	// Launchers the cluster offers (empty: Torchrun and MPI).
	Launchers []v1alpha1.Launcher
	// WorkDir is spec.slurm.workDir; the suite makes the users' folders.
	WorkDir string
	// ContainerRuntime is spec.slurm.containerRuntime (empty: None).
	ContainerRuntime v1alpha1.ContainerRuntime
	// Images is spec.images. Nil on a cluster without a container
	// runtime: HarnessHostImages, what the suites' runtimes name.
	Images *v1alpha1.TargetImages
	// Status, when set, is the agent's status endpoint (Trainer's
	// TrainJob status API for the jobs).
	Status *statusapi.EndpointOptions
}

// HarnessHostImages are the images the harness cluster's host stands for
// when a suite names none: its chroot's Debian Python, PyTorch and Open MPI
// (and a stand-in flux where a suite adds one) run what the runtimes of
// the suites and Kubeflow's shipped ones are written for.
var HarnessHostImages = []string{"docker.io/pytorch/pytorch:*", "docker.io/mpioperator/*", "ghcr.io/kubeflow/*",
	"nvcr.io/nvidia/*", "docker.io/library/ubuntu:*", "ghcr.io/flux-framework/*", "ghcr.io/converged-computing/*", "registry.example/*"}

// Controllers are the running hub and agents.
type Controllers struct {
	Hub    *Component
	Agents map[string]*Component
	// AgentConfigs are the agents' RBAC-limited hub credentials.
	AgentConfigs map[string]*rest.Config
	MetricsURL   string
	// StatusAddrs are the spoke agents' status endpoints (SpokeStatus).
	StatusAddrs map[string]string
}

// Registration is what Register made on the hub: the credentials and
// options the hub and each agent run with, whether in this process (Start)
// or as separate binaries.
type Registration struct {
	// HubConfig is the hub's identity, bound to config/rbac/hub only.
	HubConfig *rest.Config
	// HubOptions serve the pinning webhook Register installed, metrics at
	// MetricsURL and the lease settings of Options.
	HubOptions hub.ManagerOptions
	// AgentConfigs are the agents' RBAC-limited hub credentials.
	AgentConfigs map[string]*rest.Config
	MetricsURL   string
}

// Register creates the fleet's Targets (spokes, then o.Slurm), the agents'
// credentials, the hub's identity and the pinning webhook, and starts
// nothing.
func Register(ctx context.Context, f *fleet.Fleet, o Options) (*Registration, error) {
	o.defaults()
	r := &Registration{AgentConfigs: map[string]*rest.Config{}}
	for _, s := range f.Spokes {
		cfg, err := registerTarget(ctx, f.Hub, s.Name, o)
		if err != nil {
			return nil, err
		}
		r.AgentConfigs[s.Name] = cfg
	}
	for _, st := range o.Slurm {
		cfg, err := registerSlurmTarget(ctx, f.Hub, st, o)
		if err != nil {
			return nil, err
		}
		r.AgentConfigs[st.Name] = cfg
	}
	hubOpts, err := installWebhook(ctx, f.Hub)
	if err != nil {
		return nil, err
	}
	metricsPort, err := fleet.FreePort()
	if err != nil {
		return nil, err
	}
	r.MetricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
	hubOpts.MetricsAddr = fmt.Sprintf("127.0.0.1:%d", metricsPort)
	hubOpts.QPS, hubOpts.Burst = o.HubQPS, o.HubBurst
	hubOpts.Options = hub.Options{Lease: targets.LeaseSettings{
		Duration: o.LeaseDuration, FenceAfter: o.FenceAfter, Grace: o.LeaseGrace, DisruptionThreshold: o.DisruptionThreshold}}
	hubOpts.Options.PinnedRuntimeGracePeriod = o.PinnedRuntimeGracePeriod
	r.HubOptions = hubOpts
	if r.HubConfig, err = hubIdentity(ctx, f.Hub); err != nil {
		return nil, err
	}
	return r, nil
}

func (o *Options) defaults() {
	if o.SpokeNamespace == "" {
		o.SpokeNamespace = "jobs"
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = o.LostTargetTimeout
	}
	if o.FenceAfter == 0 {
		o.FenceAfter = o.LeaseDuration
	}
}

// Start registers the fleet's spokes and starts the hub and the agents.
func Start(ctx context.Context, f *fleet.Fleet, o Options) (*Controllers, error) {
	o.defaults()
	reg, err := Register(ctx, f, o)
	if err != nil {
		return nil, err
	}
	c := &Controllers{Agents: map[string]*Component{}, AgentConfigs: reg.AgentConfigs, MetricsURL: reg.MetricsURL, StatusAddrs: map[string]string{}}
	hubCfg, hubOpts := reg.HubConfig, reg.HubOptions
	hubOpts.SkipNameValidation = true
	c.Hub = &Component{Name: "hub", build: func(context.Context) (ctrl.Manager, error) {
		return hub.NewManager(hubCfg, hubOpts)
	}}
	if err := c.Hub.Start(); err != nil {
		return nil, err
	}
	for _, s := range f.Spokes {
		s := s
		status, err := o.spokeStatus(filepath.Join(s.Dir, "trainyard-status"))
		if err != nil {
			c.Stop()
			return nil, err
		}
		if status != nil {
			c.StatusAddrs[s.Name] = status.Listen
		}
		a := &Component{Name: "agent-" + s.Name, build: func(ctx context.Context) (ctrl.Manager, error) {
			return spoke.NewKubernetesAgent(ctx, o.agentHubConfig(s.Name, c.AgentConfigs[s.Name]), spoke.KubernetesOptions{
				Target: s.Name, Spoke: s.Config, SkipNameValidation: true, Agent: o.agentOptions(s.Name), Status: status,
			})
		}}
		c.Agents[s.Name] = a
		if err := a.Start(); err != nil {
			c.Stop()
			return nil, err
		}
	}
	for _, st := range o.Slurm {
		st := st
		a := &Component{Name: "agent-" + st.Name, build: func(ctx context.Context) (ctrl.Manager, error) {
			return spoke.NewSlurmAgent(ctx, o.agentHubConfig(st.Name, c.AgentConfigs[st.Name]), spoke.SlurmOptions{
				Target: st.Name, SkipNameValidation: true, PollInterval: st.PollInterval, OutputRoot: st.Cluster.Root,
				Agent: o.agentOptions(st.Name), Status: st.Status,
			})
		}}
		c.Agents[st.Name] = a
		if err := a.Start(); err != nil {
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// spokeStatus is a spoke agent's status endpoint on a free loopback port,
// keeping its CA in dir (the spoke cluster's own folder, so that it goes
// with the cluster's logs instead of staying in /tmp), or nil without
// SpokeStatus.
func (o Options) spokeStatus(dir string) (*spoke.KubeStatus, error) {
	if !o.SpokeStatus {
		return nil, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &spoke.KubeStatus{Listen: addr, Service: StatusService, Namespace: StatusNamespace, Port: StatusPort,
		AgentLabels: StatusAgentLabels, StateDir: dir}, nil
}

// agentOptions tune the agent of target.
func (o Options) agentOptions(target string) spoke.Options {
	return spoke.Options{HeartbeatInterval: o.HeartbeatInterval, FenceInterval: o.FenceInterval, Resync: o.Resync,
		LeaseDuration: o.LeaseDuration, LeaseRenewInterval: o.LeaseRenewInterval, FenceAfter: o.FenceAfter, FenceMaxDeletes: o.FenceMaxDeletes,
		Clock: o.AgentClocks[target]}
}

func (o Options) agentHubConfig(target string, cfg *rest.Config) *rest.Config {
	if o.AgentHubConfig == nil {
		return cfg
	}
	return o.AgentHubConfig(target, rest.CopyConfig(cfg))
}

// Stop stops the agents, then the hub.
func (c *Controllers) Stop() {
	for _, a := range c.Agents {
		a.Stop()
	}
	if c.Hub != nil {
		c.Hub.Stop()
	}
}

// registerTarget creates a spoke's Target, its agent namespace, and hub
// credentials for its agent that RBAC limits to what targets.AgentRBAC grants.
func registerTarget(ctx context.Context, h *fleet.Cluster, name string, o Options) (*rest.Config, error) {
	flavor := o.Flavor
	if f, ok := o.SpokeFlavors[name]; ok {
		flavor = f
	}
	t := &v1alpha1.Target{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.TargetSpec{
			Type:    v1alpha1.TargetTypeKubernetes,
			Flavors: []string{flavor},
			Agent:   v1alpha1.AgentIdentity{Namespace: "trainyard-" + name},
			Kubernetes: &v1alpha1.KubernetesTarget{
				Namespace: o.SpokeNamespace, TopologyLevels: o.TopologyLevels, Backend: o.SpokeBackends[name],
				AllowedPodFields: withKwokToleration(o.AllowedPodFields),
			},
		},
	}
	return createTarget(ctx, h, t)
}

// withKwokToleration is allowed with fleet.KwokTaint's key among the taint
// keys pods may tolerate: the sandbox's spokes are kwok clusters, and
// runtimes written for kwok tolerate the taint kwok's examples put on
// simulated nodes, as an administrator of such a cluster would allow.
func withKwokToleration(allowed *v1alpha1.AllowedPodFields) *v1alpha1.AllowedPodFields {
	out := &v1alpha1.AllowedPodFields{}
	if allowed != nil {
		out = allowed.DeepCopy()
	}
	if !slices.Contains(out.TolerationKeys, fleet.KwokTaint.Key) {
		out.TolerationKeys = append(out.TolerationKeys, fleet.KwokTaint.Key)
	}
	return out
}

// registerSlurmTarget registers a harness Slurm cluster. The agent mints
// tokens with the cluster's JWT key, read from the chroot, and publishes
// the topology from its topology.conf.
func registerSlurmTarget(ctx context.Context, h *fleet.Cluster, st SlurmTarget, o Options) (*rest.Config, error) {
	spec := &v1alpha1.SlurmTarget{
		Endpoint:     st.Cluster.URL,
		Partitions:   []v1alpha1.SlurmPartition{{Flavor: o.Flavor, Partition: "gpu"}},
		Auth:         &v1alpha1.SlurmAuth{Type: v1alpha1.SlurmAuthSigningKey, File: st.Cluster.JWTKeyPath()},
		TopologyFile: st.Cluster.Path("/etc/slurm/topology.conf"),
		APIVersion:   st.APIVersion,
		Accounts:     st.Accounts,
		Launchers:    st.Launchers,
		WorkDir:      st.WorkDir,
		// Empty: the API server defaults it to None.
		ContainerRuntime: st.ContainerRuntime,
	}
	if len(st.Partitions) > 0 {
		spec.Partitions = st.Partitions
	}
	t := &v1alpha1.Target{
		ObjectMeta: metav1.ObjectMeta{Name: st.Name},
		Spec: v1alpha1.TargetSpec{
			Type:   v1alpha1.TargetTypeSlurm,
			Agent:  v1alpha1.AgentIdentity{Namespace: "trainyard-" + st.Name},
			Slurm:  spec,
			Images: st.Images,
		},
	}
	if t.Spec.Images == nil && !t.Spec.RunsContainers() {
		t.Spec.Images = &v1alpha1.TargetImages{HostEnvironment: HarnessHostImages}
	}
	for _, p := range spec.Partitions {
		t.Spec.Flavors = append(t.Spec.Flavors, p.Flavor)
	}
	return createTarget(ctx, h, t)
}

func createTarget(ctx context.Context, h *fleet.Cluster, t *v1alpha1.Target) (*rest.Config, error) {
	if err := h.EnsureNamespace(ctx, t.Spec.Agent.Namespace); err != nil {
		return nil, err
	}
	if err := h.Client.Create(ctx, t); err != nil {
		return nil, err
	}
	user := "trainyard-agent:" + t.Name
	agent := rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}
	hubSubject := rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: hubUser}
	for _, obj := range targets.AgentRBAC(t, agent, hubSubject) {
		if err := h.Client.Create(ctx, obj); err != nil {
			return nil, err
		}
	}
	return h.AddUser(user)
}

// hubUser is the hub's identity on the sandbox hub.
const hubUser = "trainyard-hub"

// hubIdentity returns credentials for a hub user bound to nothing but the
// generated ClusterRole in config/rbac/hub, so the tests prove the shipped
// role is enough.
func hubIdentity(ctx context.Context, h *fleet.Cluster) (*rest.Config, error) {
	root, err := fleet.RepoRoot()
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(filepath.Join(root, "config", "rbac", "hub", "role.yaml"))
	if err != nil {
		return nil, err
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(raw, role); err != nil {
		return nil, fmt.Errorf("config/rbac/hub/role.yaml: %w", err)
	}
	user := hubUser
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := h.Client.Create(ctx, obj); client.IgnoreAlreadyExists(err) != nil {
			return nil, err
		}
	}
	return h.AddUser(user)
}

// installWebhook registers the hub's runtime-pinning webhook at a local
// port with a fresh serving certificate, and installs the admission
// policies and tenant roles from config/ as an administrator would
// (installShipped).
func installWebhook(ctx context.Context, h *fleet.Cluster) (hub.ManagerOptions, error) {
	port, err := fleet.FreePort()
	if err != nil {
		return hub.ManagerOptions{}, err
	}
	certDir := filepath.Join(h.Dir, "trainyard-webhook-certs")
	ca, err := fleet.ServingCert(certDir)
	if err != nil {
		return hub.ManagerOptions{}, err
	}
	base := fmt.Sprintf("https://127.0.0.1:%d", port)
	if err := h.Client.Create(ctx, snapshot.WebhookConfiguration(base, ca)); err != nil {
		return hub.ManagerOptions{}, err
	}
	if err := installShipped(ctx, h); err != nil {
		return hub.ManagerOptions{}, err
	}
	return hub.ManagerOptions{WebhookHost: "127.0.0.1", WebhookPort: port, WebhookCertDir: certDir}, nil
}

// Component is a hub or agent manager that can be stopped and started
// again, as a crashed and restarted pod would be.
type Component struct {
	Name   string
	build  func(ctx context.Context) (ctrl.Manager, error)
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan error
}

// Start starts the component unless it runs already. A manager that exits
// at once (its previous incarnation may still hold a listening port for a
// moment after stopping) is started again.
func (c *Component) Start() error {
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
			return fmt.Errorf("build %s: %w", c.Name, err)
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
	return fmt.Errorf("start %s: %w", c.Name, lastErr)
}

// Stop stops the component and waits until its manager has returned.
func (c *Component) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel == nil {
		return
	}
	c.cancel()
	<-c.done
	c.cancel = nil
}

package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Options chooses what runs beside one cluster's kube-apiserver and etcd.
type Options struct {
	// Name labels logs and kubeconfig files.
	Name string
	// CRDs are CRD set names (CRDsKueue, CRDsJobSet, ...) installed at start.
	CRDs []string
	// ControllerManager runs kube-controller-manager (Jobs, garbage collection).
	ControllerManager bool
	// Scheduler runs kube-scheduler.
	Scheduler bool
	// Kwok runs kwok, which makes nodes annotated kwok.x-k8s.io/node=fake
	// Ready and plays their pods' lifecycle.
	Kwok bool
	// JobSet runs the JobSet manager with its webhooks.
	JobSet bool
	// Storage runs hostpath-provisioner and makes its StorageClass the
	// default, so PersistentVolumeClaims bind; it needs ControllerManager,
	// whose PV controller does the binding.
	Storage bool
	// LWS runs the LeaderWorkerSet manager with its webhooks; it needs JobSet
	// (whose webhook certificates it shares).
	LWS bool
	// Kueue runs the Kueue manager with its webhooks.
	Kueue bool
	// KueueFairSharing turns on Kueue's fair sharing (cohort preemption and
	// admission by weighted share).
	KueueFairSharing bool
	// Scheme for the returned client; defaults to Scheme().
	Scheme *runtime.Scheme
	// Dir holds logs, configs and kubeconfigs; defaults to a temp folder
	// that Stop removes.
	Dir string
	// StartTimeout bounds start-up of each component (default 2 minutes).
	StartTimeout time.Duration
}

// Cluster is one running control plane with its components.
type Cluster struct {
	Name string
	// Config and Client act as cluster admin (system:masters).
	Config *rest.Config
	Client client.Client
	// Kubeconfig is the path of an admin kubeconfig file for this cluster.
	Kubeconfig string
	// Dir holds the components' logs.
	Dir string

	env   *envtest.Environment
	procs []*Process
	// tempDir: Start made Dir because none was given, so nobody asked to
	// keep its logs; Stop removes it with the admin kubeconfig in it.
	tempDir bool
}

// Start brings up a cluster as opts say. On error everything already
// started is stopped again.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	reapOrphans()
	if opts.LWS && !opts.JobSet {
		return nil, errors.New("a harness cluster runs LWS beside JobSet, whose webhook certificates it uses")
	}
	if opts.Storage && !opts.ControllerManager {
		return nil, errors.New("a harness cluster with Storage runs kube-controller-manager, whose PV controller binds claims")
	}
	if opts.Scheme == nil {
		opts.Scheme = Scheme()
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 2 * time.Minute
	}
	tempDir := opts.Dir == ""
	if tempDir {
		if opts.Dir, err = os.MkdirTemp("", "trainyard-"+opts.Name+"-"); err != nil {
			return nil, err
		}
		defer func() {
			if c == nil {
				_ = os.RemoveAll(opts.Dir)
			}
		}()
	} else if err = os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, err
	}
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	crds, err := CRDPaths(opts.CRDs...)
	if err != nil {
		return nil, err
	}
	var hooks *webhookSet
	// envtest serves one webhook endpoint per API server: Kueue's where
	// Kueue runs (JobSet's then get a port of their own), else JobSet's.
	switch {
	case opts.Kueue:
		hooks, err = kueueHubWebhooks()
	case opts.JobSet:
		hooks, err = jobSetWebhooks()
	}
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: bin,
		CRDDirectoryPaths:     crds,
		ErrorIfCRDPathMissing: true,
		Scheme:                opts.Scheme,
		// envtest's own waits (20 s for etcd and kube-apiserver, 10 s for
		// CRDs to be served) give up on a busy 2-core machine; each ends
		// as soon as its component is ready, so longer bounds cost nothing
		// when it is not busy.
		ControlPlaneStartTimeout: opts.StartTimeout / 2,
		CRDInstallOptions:        envtest.CRDInstallOptions{MaxTime: opts.StartTimeout},
	}
	if opts.Kwok {
		if err := withKwokLogs(env); err != nil {
			return nil, err
		}
	}
	if hooks != nil {
		env.WebhookInstallOptions = envtest.WebhookInstallOptions{
			LocalServingHost:   "127.0.0.1",
			MutatingWebhooks:   hooks.mutating,
			ValidatingWebhooks: hooks.validating,
		}
	}
	c = &Cluster{Name: opts.Name, Dir: opts.Dir, env: env, tempDir: tempDir}
	defer func() {
		if err != nil {
			_ = c.Stop()
			c = nil
		}
	}()
	if c.Config, err = env.Start(); err != nil {
		return c, fmt.Errorf("%s: start control plane: %w", opts.Name, err)
	}
	// Clients of many test objects must not be throttled by client-go's
	// defaults (5 QPS), or the harness measures its own rate limiter.
	c.Config.QPS, c.Config.Burst = 500, 1000
	if c.Client, err = client.New(c.Config, client.Options{Scheme: opts.Scheme}); err != nil {
		return c, err
	}
	if c.Kubeconfig, err = c.writeAdminKubeconfig(); err != nil {
		return c, err
	}
	startCtx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	for _, step := range []struct {
		enabled bool
		run     func(context.Context) error
	}{
		{opts.ControllerManager, c.startControllerManager},
		{opts.Scheduler, c.startScheduler},
		{opts.Storage, c.startStorage},
		{opts.Kwok, c.startKwok},
		{opts.JobSet, func(ctx context.Context) error { return c.startJobSet(ctx, opts.Kueue) }},
		{opts.LWS, c.startLWS},
		{opts.Kueue, func(ctx context.Context) error { return c.startKueue(ctx, opts.KueueFairSharing) }},
	} {
		if step.enabled {
			if err = step.run(startCtx); err != nil {
				return c, fmt.Errorf("%s: %w", opts.Name, err)
			}
		}
	}
	return c, nil
}

func (c *Cluster) writeAdminKubeconfig() (string, error) {
	user, err := c.env.AddUser(envtest.User{Name: "harness-admin", Groups: []string{"system:masters"}}, c.Config)
	if err != nil {
		return "", err
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	p := filepath.Join(c.Dir, "admin.kubeconfig")
	return p, os.WriteFile(p, kc, 0o600)
}

// AddUser returns a rest.Config for a user in the given groups; RBAC decides
// what it may do. Agents' narrowly scoped credentials are made this way.
func (c *Cluster) AddUser(name string, groups ...string) (*rest.Config, error) {
	u, err := c.env.AddUser(envtest.User{Name: name, Groups: groups}, c.Config)
	if err != nil {
		return nil, err
	}
	return u.Config(), nil
}

// Processes lists the component processes of the cluster.
func (c *Cluster) Processes() []*Process { return c.procs }

// Stop ends every component and then the control plane, and removes the
// cluster's folder when Start made it.
func (c *Cluster) Stop() error {
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].Stop(5 * time.Second)
	}
	c.procs = nil
	var err error
	if c.env != nil && c.env.ControlPlane.APIServer != nil {
		err = c.env.Stop()
	}
	if c.tempDir {
		err = errors.Join(err, os.RemoveAll(c.Dir))
	}
	return err
}

// CheckAlive returns an error naming any component that has exited, with
// the end of its log, so a test can tell a dead controller from a slow one.
func (c *Cluster) CheckAlive() error {
	var errs []error
	for _, p := range c.procs {
		if exited, err := p.Exited(); exited {
			errs = append(errs, fmt.Errorf("%s/%s exited (%v):\n%s", c.Name, p.Name, err, p.LogTail(2000)))
		}
	}
	return errors.Join(errs...)
}

// EnsureNamespace creates a namespace if it does not exist.
func (c *Cluster) EnsureNamespace(ctx context.Context, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Client.Create(ctx, ns); err != nil && !isAlreadyExists(err) {
		return err
	}
	return nil
}

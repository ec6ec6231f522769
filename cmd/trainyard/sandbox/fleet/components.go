package fleet

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

//go:embed kwok-stages.yaml
var kwokStages []byte

func isAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }

func (c *Cluster) run(name, binName string, args ...string) (*Process, error) {
	bin, err := binary(binName)
	if err != nil {
		return nil, err
	}
	p, err := startProcess(c.Dir, name, bin, args...)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	return p, nil
}

// settle fails if p exits within a short while: components without a probe
// port (secure-port 0) show a bad flag or config by exiting at once.
func settle(ctx context.Context, p *Process) error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited at start (%v):\n%s", p.Name, p.err, p.LogTail(3000))
	case <-time.After(time.Second):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Cluster) startControllerManager(ctx context.Context) error {
	certDir := c.env.ControlPlane.APIServer.CertDir
	p, err := c.run("kube-controller-manager", "kube-controller-manager",
		"--kubeconfig="+c.Kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		"--cluster-name="+c.Name,
		"--service-account-private-key-file="+filepath.Join(certDir, "sa-signer.key"),
		"--use-service-account-credentials=false",
		// No cloud, no pod network: the controllers that need them stay off.
		// The PV controller stays on: it binds claims to the volumes
		// hostpath-provisioner makes (Options.Storage). No kubelet attaches
		// volumes, so attach-detach is off.
		"--controllers=*,-nodeipam,-service-lb-controller,-route,-cloud-node-lifecycle,-attachdetach",
		// kwok nodes never run kubelets; keep pods on them when a lease lapses
		// during a slow test rather than evicting them.
		"--node-monitor-grace-period=5m",
		"--concurrent-job-syncs=20",
		"--kube-api-qps=200", "--kube-api-burst=400",
	)
	if err != nil {
		return err
	}
	return settle(ctx, p)
}

func (c *Cluster) startScheduler(ctx context.Context) error {
	p, err := c.run("kube-scheduler", "kube-scheduler",
		"--kubeconfig="+c.Kubeconfig, "--leader-elect=false", "--secure-port=0",
		"--kube-api-qps=200", "--kube-api-burst=400")
	if err != nil {
		return err
	}
	return settle(ctx, p)
}

func (c *Cluster) startKwok(ctx context.Context) error {
	cfg := filepath.Join(c.Dir, "kwok-stages.yaml")
	if err := os.WriteFile(cfg, kwokStages, 0o644); err != nil {
		return err
	}
	// kwok's kubelet-like server answers the API server's log requests
	// (self-signed HTTPS, which the API server does not verify); nodes
	// advertise it as their InternalIP and kubelet port.
	port, err := FreePort()
	if err != nil {
		return err
	}
	p, err := c.run("kwok", "kwok",
		"--kubeconfig="+c.Kubeconfig,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--cidr=10.244.0.0/16", "--node-ip=127.0.0.1",
		fmt.Sprintf("--node-port=%d", port), fmt.Sprintf("--server-address=127.0.0.1:%d", port),
		"--enable-crds=Logs",
		"--node-lease-duration-seconds=40",
		"--config="+cfg)
	if err != nil {
		return err
	}
	return settle(ctx, p)
}

func (c *Cluster) webhookServing() (host string, port int, certDir string) {
	w := c.env.WebhookInstallOptions
	return w.LocalServingHost, w.LocalServingPort, w.LocalServingCertDir
}

// startJobSet runs the JobSet manager. Beside Kueue (a MultiKueue worker),
// envtest's endpoint is Kueue's, so JobSet serves its webhooks on a port of
// its own, installed here as LWS's are.
func (c *Cluster) startJobSet(ctx context.Context, besideKueue bool) error {
	if !besideKueue {
		_, port, _ := c.webhookServing()
		return c.startWebhookManager(ctx, "jobset", "config.jobset.x-k8s.io/v1alpha1", port)
	}
	port, err := FreePort()
	if err != nil {
		return err
	}
	if err := c.startWebhookManager(ctx, "jobset", "config.jobset.x-k8s.io/v1alpha1", port); err != nil {
		return err
	}
	set, err := jobSetWebhooks()
	if err != nil {
		return err
	}
	return c.installDirect(ctx, "jobset", set, port)
}

// installDirect installs set's webhook configurations pointing straight at
// port on the serving host, with envtest's CA.
func (c *Cluster) installDirect(ctx context.Context, name string, set *webhookSet, port int) error {
	host, _, _ := c.webhookServing()
	for _, o := range set.direct(fmt.Sprintf("https://%s:%d", host, port), c.env.WebhookInstallOptions.LocalServingCAData) {
		if err := c.Client.Create(ctx, o); err != nil {
			return fmt.Errorf("install %s webhooks: %w", name, err)
		}
	}
	return nil
}

// startWebhookManager runs a kubebuilder-style manager (JobSet, LWS) with
// its webhooks on port and envtest's certificates, and waits until ready.
func (c *Cluster) startWebhookManager(ctx context.Context, name, configAPI string, port int) error {
	health, err := FreePort()
	if err != nil {
		return err
	}
	host, _, certDir := c.webhookServing()
	cfg := fmt.Sprintf(`apiVersion: %s
kind: Configuration
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
webhook:
  host: %s
  port: %d
  certDir: %s
metrics:
  bindAddress: "0"
health:
  healthProbeBindAddress: 127.0.0.1:%d
clientConnection:
  qps: 200
  burst: 400
`, configAPI, host, port, certDir, health)
	cfgPath := filepath.Join(c.Dir, name+"-config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	p, err := c.run(name, name, "--kubeconfig="+c.Kubeconfig, "--config="+cfgPath)
	if err != nil {
		return err
	}
	if err := waitHTTPOK(ctx, p, fmt.Sprintf("http://127.0.0.1:%d/readyz", health)); err != nil {
		return err
	}
	return waitTCP(ctx, p, fmt.Sprintf("%s:%d", host, port))
}

// KueueNamespace is where the harness's Kueue keeps its own objects.
//
// The harness's Kueue runs its controllers as Kueue's shipped
// configuration does (controller.groupKindConcurrency), and the JobSet and
// TrainJob integrations, which that file leaves at one worker, with five:
// with one, Kueue's Workload creation paces every benchmark.
const KueueNamespace = "kueue-system"

func (c *Cluster) startKueue(ctx context.Context, fairSharing bool) error {
	health, err := FreePort()
	if err != nil {
		return err
	}
	metrics, err := FreePort()
	if err != nil {
		return err
	}
	if err := c.EnsureNamespace(ctx, KueueNamespace); err != nil {
		return err
	}
	host, port, certDir := c.webhookServing()
	if err := ensureKueueMetricsCerts(certDir); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: %s
manageJobsWithoutQueueName: false
internalCertManagement:
  enable: false
leaderElection:
  leaderElect: false
webhook:
  host: %s
  port: %d
  certDir: %s
metrics:
  bindAddress: 127.0.0.1:%d
health:
  healthProbeBindAddress: 127.0.0.1:%d
clientConnection:
  qps: 200
  burst: 400
controller:
  groupKindConcurrency:
    Job.batch: 5
    Pod: 5
    Workload.kueue.x-k8s.io: 10
    LocalQueue.kueue.x-k8s.io: 5
    Cohort.kueue.x-k8s.io: 1
    ClusterQueue.kueue.x-k8s.io: 5
    ResourceFlavor.kueue.x-k8s.io: 1
    JobSet.jobset.x-k8s.io: 5
    TrainJob.trainer.kubeflow.org: 5
integrations:
  frameworks:
  - batch/job
  - jobset.x-k8s.io/jobset
  # TrainJob is the hub's (hub/kueuejob), not Kueue's built-in framework.
  externalFrameworks:
  - TrainJob.v1alpha1.trainer.kubeflow.org
featureGates:
  VisibilityOnDemand: false
`, KueueNamespace, host, port, certDir, metrics, health)
	if fairSharing {
		cfg += "fairSharing:\n  preemptionStrategies: [LessThanOrEqualToFinalShare, LessThanInitialShare]\n"
	}
	cfgPath := filepath.Join(c.Dir, "kueue-config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	p, err := c.run("kueue", "kueue", "--kubeconfig="+c.Kubeconfig, "--config="+cfgPath)
	if err != nil {
		return err
	}
	return waitHTTPOK(ctx, p, fmt.Sprintf("http://127.0.0.1:%d/readyz", health))
}

// kueueMetricsCertDir is where Kueue v0.17 reads its metrics serving
// certificate whenever its internal cert management is off; the path is
// fixed in its main.go. The harness puts a serving certificate there once
// (it needs root) and never scrapes Kueue's metrics over TLS itself.
const kueueMetricsCertDir = "/etc/kueue/metrics/certs"

func ensureKueueMetricsCerts(from string) error {
	if _, err := os.Stat(filepath.Join(kueueMetricsCertDir, "tls.key")); err == nil {
		return nil
	}
	if err := os.MkdirAll(kueueMetricsCertDir, 0o755); err != nil {
		return fmt.Errorf("kueue needs %s (run the harness as root): %w", kueueMetricsCertDir, err)
	}
	for _, f := range []string{"tls.crt", "tls.key"} {
		b, err := os.ReadFile(filepath.Join(from, f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(kueueMetricsCertDir, f), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// startLWS runs the LeaderWorkerSet manager. envtest serves one webhook
// endpoint per API server (JobSet's or Kueue's), so LWS gets a port of its own with the
// same certificates, and its webhook configurations are installed here.
func (c *Cluster) startLWS(ctx context.Context) error {
	port, err := FreePort()
	if err != nil {
		return err
	}
	if err := c.startWebhookManager(ctx, "lws", "config.lws.x-k8s.io/v1alpha1", port); err != nil {
		return err
	}
	set, err := lwsWebhooks()
	if err != nil {
		return err
	}
	return c.installDirect(ctx, "lws", set, port)
}

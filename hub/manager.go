package hub

import (
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/dispatch"
	"github.com/trainyard-dev/trainyard/hub/snapshot"
	"github.com/trainyard-dev/trainyard/internal/health"
	"github.com/trainyard-dev/trainyard/internal/metrics"
)

// Client rate limits. client-go's defaults (5 QPS) cap a dispatcher at about
// one job a second, as MultiKueue's benchmark shows; the hub writes a few
// objects per job.
const (
	DefaultQPS   = 100
	DefaultBurst = 200
)

// ManagerOptions are the hub process's settings.
type ManagerOptions struct {
	MetricsAddr string
	ProbeAddr   string
	// PprofAddr serves Go's /debug/pprof; empty or "0" serves none.
	PprofAddr               string
	LeaderElect             bool
	LeaderElectionNamespace string
	QPS                     float32
	Burst                   int
	// SkipNameValidation lets a process build the hub twice, as tests do
	// when they restart it.
	SkipNameValidation bool
	// WebhookHost, WebhookPort and WebhookCertDir serve the runtime-pinning
	// webhook (tls.crt, tls.key in the folder); port 0 serves none.
	WebhookHost    string
	WebhookPort    int
	WebhookCertDir string
	Options
}

// Scheme holds every kind the hub reads or writes.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(kueue.AddToScheme(s))
	utilruntime.Must(trainer.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}

// agentLeases selects the Leases agents hold (v1alpha1.LeaseName).
func agentLeases() labels.Selector {
	req, err := labels.NewRequirement(v1alpha1.LabelLeaseTarget, selection.Exists, nil)
	utilruntime.Must(err)
	return labels.NewSelector().Add(*req)
}

// NewManager builds the hub manager with all controllers registered.
func NewManager(cfg *rest.Config, o ManagerOptions) (ctrl.Manager, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(metrics.CountWriteErrors)
	cfg.QPS, cfg.Burst = o.QPS, o.Burst
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = DefaultQPS, DefaultBurst
	}
	if o.MetricsAddr == "" {
		o.MetricsAddr = "0"
	}
	if o.ProbeAddr == "" {
		o.ProbeAddr = "0"
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  Scheme(),
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:  o.ProbeAddr,
		PprofBindAddress:        o.PprofAddr,
		LeaderElection:          o.LeaderElect,
		LeaderElectionID:        "trainyard-hub.trainyard.dev",
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		// A replica that stops gracefully (the process exits when the
		// manager returns) hands the lease over at once instead of making
		// its successor wait out the lease.
		LeaderElectionReleaseOnCancel: true,
		Controller: config.Controller{SkipNameValidation: ptr.To(o.SkipNameValidation),
			// Kueue's TrainJob reconciler (hub/kueuejob) makes each job's
			// Workload; with one worker a burst of submissions waits in line.
			GroupKindConcurrency: map[string]int{"TrainJob.trainer.kubeflow.org": 5}},
		// The hub reads one ConfigMap per dispatch attempt (Trainer's runtime
		// snapshot, hub/snapshot): read it live rather than cache every
		// ConfigMap of the cluster.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.ConfigMap{}}}},
		// Of all Leases, the hub watches only its agents' (hub/targets).
		// No cached object keeps its managed fields (the hub never reads
		// them), and Dispatches keep only what the hub reads of them, so
		// finished ones cost little while they stay (dispatch.CacheTransform).
		Cache: cache.Options{
			DefaultTransform: cache.TransformStripManagedFields(),
			ByObject: map[client.Object]cache.ByObject{
				&coordinationv1.Lease{}: {Label: agentLeases()},
				&v1alpha1.Dispatch{}:    {Transform: dispatch.CacheTransform},
			},
		},
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: o.WebhookHost, Port: o.WebhookPort, CertDir: o.WebhookCertDir,
		}),
	})
	if err != nil {
		return nil, err
	}
	if o.WebhookPort > 0 {
		mgr.GetWebhookServer().Register(snapshot.WebhookPath, &webhook.Admission{
			Handler: &snapshot.PinWebhook{Reader: mgr.GetAPIReader(), Client: mgr.GetClient(),
				RestampAfter: snapshot.RestampAfterFor(o.PinnedRuntimeGracePeriod)},
		})
		mgr.GetWebhookServer().Register(snapshot.KeepPinWebhookPath, &webhook.Admission{Handler: snapshot.KeepPinWebhook{}})
	}
	if err := mgr.Add(&metrics.HubState{Reader: mgr.GetClient(), Clock: o.Clock}); err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	if err := addReadyz(mgr, o.WebhookPort > 0); err != nil {
		return nil, err
	}
	return mgr, Setup(mgr, o.Options)
}

// addReadyz makes /readyz wait for the caches and, when the hub serves its
// runtime-pinning webhook (which fails closed), for the webhook server.
// Every replica serves the webhook, elected or not, so a standby is ready
// too.
func addReadyz(mgr ctrl.Manager, webhook bool) error {
	if err := mgr.AddReadyzCheck("caches", health.CachesSynced(mgr.GetCache())); err != nil {
		return err
	}
	if !webhook {
		return nil
	}
	return mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker())
}

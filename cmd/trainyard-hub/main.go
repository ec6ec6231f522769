// Command trainyard-hub runs trainyard's hub controllers beside Kueue: the
// admission check for controllerName trainyard.dev/dispatcher, target
// health and the dispatch lifecycle. The hub must run no Trainer controller
// for the namespaces trainyard serves (see README).
package main

import (
	"flag"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/trainyard-dev/trainyard/hub"
	"github.com/trainyard-dev/trainyard/hub/targets"
)

func main() {
	var o hub.ManagerOptions
	var qps float64
	flag.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8080", "address of the Prometheus /metrics endpoint (0 disables)")
	flag.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	flag.StringVar(&o.PprofAddr, "pprof-bind-address", "0",
		"address of Go's /debug/pprof profiles (0 disables; they show memory contents, so bind it to localhost)")
	flag.BoolVar(&o.LeaderElect, "leader-elect", true, "elect one active hub among replicas")
	flag.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader-election lease (default: the pod's)")
	flag.Float64Var(&qps, "kube-api-qps", hub.DefaultQPS, "queries per second to the hub API server")
	flag.IntVar(&o.Burst, "kube-api-burst", hub.DefaultBurst, "burst of queries to the hub API server")
	flag.DurationVar(&o.Lease.Duration, "agent-lease-duration", targets.DefaultLeaseDuration,
		"how long an agent's lease lasts after the hub saw it renewed; agents must use the same --lease-duration (a longer one they advertise wins)")
	flag.DurationVar(&o.Lease.FenceAfter, "agent-fence-after", targets.DefaultFenceAfter,
		"how long an agent of a Requeue target goes without renewing its lease before it stops its running jobs; agents must use the same --fence-after (a longer one they advertise wins)")
	flag.DurationVar(&o.Lease.Grace, "lost-target-grace", targets.DefaultLeaseGrace,
		"further wait, after the fence deadline and the agent's advertised stop bound, before a silent target's jobs are requeued elsewhere: covers the agent's stop call")
	flag.Float64Var(&o.Lease.DisruptionThreshold, "disruption-threshold", targets.DefaultDisruptionThreshold,
		"share of targets silent at once above which the hub assumes it is cut off and requeues nothing")
	flag.IntVar(&o.Concurrency, "dispatch-concurrency", 8, "workloads reconciled in parallel")
	flag.IntVar(&o.WebhookPort, "webhook-port", 9443, "port of the runtime-pinning webhook (0 disables it)")
	flag.StringVar(&o.WebhookHost, "webhook-host", "", "address the runtime-pinning webhook listens on (empty: every address)")
	flag.StringVar(&o.WebhookCertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs", "folder with the webhook's tls.crt and tls.key")
	zo := zap.Options{}
	zo.BindFlags(flag.CommandLine)
	flag.Parse()
	o.QPS = float32(qps)
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zo)))
	log := ctrl.Log.WithName("setup")

	mgr, err := hub.NewManager(ctrl.GetConfigOrDie(), o)
	if err != nil {
		log.Error(err, "unable to build the hub manager")
		os.Exit(1)
	}
	log.Info("starting trainyard hub")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "hub stopped")
		os.Exit(1)
	}
}

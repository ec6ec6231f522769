// Command trainyard-agent runs next to one execution system: it pulls its
// target's Dispatches from the hub with credentials limited to its hub
// namespace, runs them through a backend and reports status, capacity and
// a heartbeat.
package main

import (
	"flag"
	"fmt"
	"os"

	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/trainyard-dev/trainyard/spoke"
)

func main() {
	var o spoke.KubernetesOptions
	var hubKubeconfig, spokeKubeconfig, backend string
	var qps float64
	flag.StringVar(&o.Target, "target", "", "name of the Target this agent serves (required)")
	flag.StringVar(&backend, "backend", "kubernetes", "execution system: kubernetes")
	flag.StringVar(&hubKubeconfig, "hub-kubeconfig", "", "kubeconfig of the hub (credentials limited to the target's agent namespace)")
	flag.StringVar(&spokeKubeconfig, "spoke-kubeconfig", "", "kubeconfig of the spoke (default: in-cluster)")
	flag.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8080", "address of the Prometheus /metrics endpoint (0 disables)")
	flag.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	flag.BoolVar(&o.LeaderElect, "leader-elect", true, "elect one active agent among replicas")
	flag.Float64Var(&qps, "kube-api-qps", spoke.DefaultQPS, "queries per second to each API server")
	flag.IntVar(&o.Burst, "kube-api-burst", spoke.DefaultBurst, "burst of queries to each API server")
	flag.DurationVar(&o.Agent.HeartbeatInterval, "heartbeat-interval", spoke.DefaultHeartbeatInterval, "how often capacity and a heartbeat are published")
	zo := zap.Options{}
	zo.BindFlags(flag.CommandLine)
	flag.Parse()
	o.QPS = float32(qps)
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zo)))
	log := ctrl.Log.WithName("setup")
	if err := run(o, backend, hubKubeconfig, spokeKubeconfig); err != nil {
		log.Error(err, "agent stopped")
		os.Exit(1)
	}
}

func run(o spoke.KubernetesOptions, backend, hubKubeconfig, spokeKubeconfig string) error {
	if o.Target == "" {
		return fmt.Errorf("--target is required")
	}
	if backend != "kubernetes" {
		return fmt.Errorf("unknown --backend %q", backend)
	}
	hubCfg, err := clientcmd.BuildConfigFromFlags("", hubKubeconfig)
	if err != nil {
		return fmt.Errorf("hub kubeconfig: %w", err)
	}
	if o.Spoke, err = clientcmd.BuildConfigFromFlags("", spokeKubeconfig); err != nil {
		return fmt.Errorf("spoke kubeconfig: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()
	mgr, err := spoke.NewKubernetesAgent(ctx, hubCfg, o)
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}

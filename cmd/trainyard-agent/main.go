// Command trainyard-agent runs next to one execution system: it pulls its
// target's Dispatches from the hub with credentials limited to its hub
// namespace, runs them through a backend and reports status, capacity and
// a heartbeat.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/trainyard-dev/trainyard/spoke"
	"github.com/trainyard-dev/trainyard/spoke/statusapi"
)

type flags struct {
	target, backend, hubKubeconfig, spokeKubeconfig string
	spokeTenantRole                                 string
	metricsAddr, probeAddr, pprofAddr               string
	leaderElect                                     bool
	qps                                             float64
	burst                                           int
	heartbeat, slurmPoll                            time.Duration
	fenceInterval, resync                           time.Duration
	slurmServiceUser                                string
	leaseDuration, leaseRenew, fenceAfter           time.Duration
	electionKubeconfig, electionNamespace           string
	fenceMaxDeletes                                 int
	hubID                                           string
	slurmOutputRoot                                 string
	statusListen, statusURL, statusStateDir         string
	statusTokenLifetime                             time.Duration
	statusService, statusServiceNamespace           string
	statusServicePort                               int
	statusAgentLabels, statusPod                    string
}

func main() {
	var f flags
	flag.StringVar(&f.target, "target", "", "name of the Target this agent serves (required)")
	flag.StringVar(&f.backend, "backend", "kubernetes", "execution system: kubernetes or slurm (must match the Target's type)")
	flag.StringVar(&f.hubKubeconfig, "hub-kubeconfig", "", "kubeconfig of the hub (credentials limited to the target's agent namespace)")
	flag.StringVar(&f.spokeKubeconfig, "spoke-kubeconfig", "", "kubeconfig of the spoke (kubernetes backend; default: in-cluster)")
	flag.StringVar(&f.spokeTenantRole, "spoke-tenant-role", "", "spoke ClusterRole the agent binds to itself in each tenant namespace it makes (kubernetes backend; empty: its own RBAC covers them)")
	flag.StringVar(&f.metricsAddr, "metrics-bind-address", ":8080", "address of the Prometheus /metrics endpoint (0 disables)")
	flag.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	flag.StringVar(&f.pprofAddr, "pprof-bind-address", "0",
		"address of Go's /debug/pprof profiles (0 disables; they show memory contents, so bind it to localhost)")
	flag.BoolVar(&f.leaderElect, "leader-elect", true, "elect one active agent among replicas")
	flag.Float64Var(&f.qps, "kube-api-qps", spoke.DefaultQPS, "queries per second to each API server")
	flag.IntVar(&f.burst, "kube-api-burst", spoke.DefaultBurst, "burst of queries to each API server")
	flag.DurationVar(&f.heartbeat, "heartbeat-interval", spoke.DefaultHeartbeatInterval, "how often capacity and a heartbeat are published")
	flag.DurationVar(&f.slurmPoll, "slurm-poll-interval", spoke.DefaultSlurmPollInterval, "how often the Slurm job list is read for state changes (slurm backend)")
	flag.StringVar(&f.slurmOutputRoot, "slurm-output-root", "", "where the Slurm cluster's filesystem is mounted in the agent, to read job output for `trainyard logs` (slurm backend; \"/\" on a login node; empty: logs off)")
	flag.DurationVar(&f.leaseDuration, "lease-duration", spoke.DefaultLeaseDuration,
		"without renewing its lease on the hub for this long, the agent starts no new remote work; equal to the hub's --agent-lease-duration")
	flag.DurationVar(&f.fenceAfter, "fence-after", spoke.DefaultFenceAfter,
		"on a target whose leaseLoss is Requeue, the agent stops its running remote work after this long without renewing its lease; equal to the hub's --agent-fence-after")
	flag.StringVar(&f.electionKubeconfig, "leader-election-kubeconfig", "",
		"kubeconfig of the cluster where the replicas elect their leader (default: the cluster the agent runs in, else the hub)")
	flag.StringVar(&f.electionNamespace, "leader-election-namespace", "",
		"namespace of the leader-election lock (default: the pod's; on the hub, the agent namespace)")
	flag.DurationVar(&f.leaseRenew, "lease-renew-interval", spoke.DefaultLeaseRenewInterval, "how often the lease on the hub is renewed")
	flag.DurationVar(&f.fenceInterval, "fence-interval", spoke.DefaultFenceInterval,
		"how often remote work whose Dispatch is gone or of another attempt is looked for and deleted (also once at start)")
	flag.DurationVar(&f.resync, "resync-period", spoke.DefaultResync, "how often each Dispatch is reconciled again without an event")
	flag.IntVar(&f.fenceMaxDeletes, "fence-max-deletes", spoke.DefaultFenceMaxDeletes, "most stale remote jobs one fence pass may delete")
	flag.StringVar(&f.hubID, "hub-id", "", "identity (kube-system namespace UID) of the only hub the fence trusts; empty: the first one seen")
	flag.StringVar(&f.slurmServiceUser, "slurm-service-user", "", "Slurm user that reads jobs and nodes and cancels jobs (slurm backend; default: slurm with a signing key, the token's user with a token)")
	flag.StringVar(&f.statusListen, "status-listen", "", "address (host:port) of Trainer's TrainJob status API for the jobs' processes (slurm backend; empty: off)")
	flag.StringVar(&f.statusURL, "status-url", "", "https://host:port at which the compute nodes reach --status-listen; its host is in the serving certificate")
	flag.StringVar(&f.statusStateDir, "status-state-dir", "", "directory keeping the status API's credential key and CA across restarts (shared by the replicas)")
	flag.StringVar(&f.statusService, "status-service", "", "the agent's Service on the spoke that leads to --status-listen (kubernetes backend)")
	flag.StringVar(&f.statusServiceNamespace, "status-service-namespace", "", "namespace of --status-service (kubernetes backend)")
	flag.IntVar(&f.statusServicePort, "status-service-port", 9443, "port of --status-service (kubernetes backend)")
	flag.StringVar(&f.statusAgentLabels, "status-agent-labels", "", "labels of the agent's pods, k=v,...: tenant pods may reach these on --status-service-port and nothing else (kubernetes backend)")
	flag.StringVar(&f.statusPod, "status-pod", os.Getenv("POD_NAME"), "this replica's pod (in --status-service-namespace; with --backend=slurm in --leader-election-namespace of the cluster it runs in): the elected replica's carries the label trainyard.dev/status-leader=true, which the status Service selects (default $POD_NAME; empty: no label)")
	flag.DurationVar(&f.statusTokenLifetime, "status-token-lifetime", statusapi.DefaultTokenLifetime, "how long a job's status credential is accepted")
	zo := zap.Options{}
	zo.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zo)))
	if err := run(f); err != nil {
		ctrl.Log.WithName("setup").Error(err, "agent stopped")
		os.Exit(1)
	}
}

func run(f flags) error {
	if f.target == "" {
		return fmt.Errorf("--target is required")
	}
	hubCfg, err := clientcmd.BuildConfigFromFlags("", f.hubKubeconfig)
	if err != nil {
		return fmt.Errorf("hub kubeconfig: %w", err)
	}
	agent := spoke.Options{HeartbeatInterval: f.heartbeat, FenceInterval: f.fenceInterval, Resync: f.resync, LeaseDuration: f.leaseDuration, LeaseRenewInterval: f.leaseRenew,
		FenceAfter: f.fenceAfter, FenceMaxDeletes: f.fenceMaxDeletes, HubID: f.hubID}
	election, err := electionOf(f)
	if err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	var mgr ctrl.Manager
	switch f.backend {
	case "kubernetes":
		var spokeCfg *rest.Config
		if spokeCfg, err = clientcmd.BuildConfigFromFlags("", f.spokeKubeconfig); err != nil {
			return fmt.Errorf("spoke kubeconfig: %w", err)
		}
		mgr, err = spoke.NewKubernetesAgent(ctx, hubCfg, spoke.KubernetesOptions{
			Target: f.target, Spoke: spokeCfg, MetricsAddr: f.metricsAddr, ProbeAddr: f.probeAddr, PprofAddr: f.pprofAddr,
			LeaderElect: f.leaderElect, Election: election, QPS: float32(f.qps), Burst: f.burst, Agent: agent,
			TenantRole: f.spokeTenantRole, Status: kubeStatusOf(f),
		})
	case "slurm":
		mgr, err = spoke.NewSlurmAgent(ctx, hubCfg, spoke.SlurmOptions{
			Target: f.target, MetricsAddr: f.metricsAddr, ProbeAddr: f.probeAddr, PprofAddr: f.pprofAddr,
			LeaderElect: f.leaderElect, Election: election, QPS: float32(f.qps), Burst: f.burst, Agent: agent,
			ServiceUser: f.slurmServiceUser, PollInterval: f.slurmPoll, OutputRoot: f.slurmOutputRoot,
			Status: statusEndpointOf(f), StatusPod: f.statusPod,
		})
	default:
		return fmt.Errorf("unknown --backend %q (kubernetes or slurm)", f.backend)
	}
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// electionOf is where the replicas elect their leader: the cluster named,
// else the one the agent runs in, else (a process outside any cluster
// with no kubeconfig for it) the hub.
func electionOf(f flags) (spoke.Election, error) {
	e := spoke.Election{Namespace: f.electionNamespace}
	if f.electionKubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", f.electionKubeconfig)
		if err != nil {
			return e, fmt.Errorf("leader-election kubeconfig: %w", err)
		}
		e.Config = cfg
		return e, nil
	}
	if cfg, err := rest.InClusterConfig(); err == nil {
		e.Config = cfg
	}
	return e, nil
}

// statusEndpointOf is the Slurm agent's status endpoint, if one is asked for.
func statusEndpointOf(f flags) *statusapi.EndpointOptions {
	if f.statusListen == "" {
		return nil
	}
	return &statusapi.EndpointOptions{Listen: f.statusListen, URL: f.statusURL, StateDir: f.statusStateDir, TokenLifetime: f.statusTokenLifetime}
}

// kubeStatusOf is the Kubernetes agent's status endpoint, if one is asked for.
func kubeStatusOf(f flags) *spoke.KubeStatus {
	if f.statusListen == "" {
		return nil
	}
	labels := map[string]string{}
	for _, kv := range strings.Split(f.statusAgentLabels, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			labels[k] = v
		}
	}
	return &spoke.KubeStatus{Listen: f.statusListen, Service: f.statusService, Namespace: f.statusServiceNamespace,
		Port: int32(f.statusServicePort), AgentLabels: labels, StateDir: f.statusStateDir, Pod: f.statusPod}
}

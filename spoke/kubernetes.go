package spoke

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	lwsv1 "sigs.k8s.io/lws/api/leaderworkerset/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/backends/jobset"
	"github.com/trainyard-dev/trainyard/backends/kubework"
	"github.com/trainyard-dev/trainyard/backends/lws"
	"github.com/trainyard-dev/trainyard/internal/metrics"
)

// Client rate limits of the agent, towards the hub and towards its spoke.
const (
	DefaultQPS   = 50
	DefaultBurst = 100
)

// KubernetesOptions configure an agent for a Kubernetes spoke.
type KubernetesOptions struct {
	Target string
	// Spoke is where jobs run.
	Spoke                  *rest.Config
	MetricsAddr, ProbeAddr string
	// PprofAddr serves Go's /debug/pprof; empty or "0" serves none.
	PprofAddr   string
	LeaderElect bool
	// Election is where the replicas elect their leader (nil: the hub).
	Election Election
	QPS      float32
	Burst    int
	// Agent tunes the agent loop; Target, Namespace and Backend are filled in.
	Agent Options
	// SkipNameValidation lets a process build the same agent twice, as
	// tests do when they restart one.
	SkipNameValidation bool
	// TenantRole, when set, is the spoke ClusterRole the agent binds to
	// itself in each tenant namespace it makes (the chart's
	// <release>-tenant): its write rights then end at those namespaces.
	TenantRole string
	// Status, when set, serves Trainer's status API to the JobSet
	// backend's trainer pods (the LeaderWorkerSet backend not yet).
	Status *KubeStatus
}

// HubScheme is what the agent reads on the hub.
func HubScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}

// SpokeScheme is what the agent reads on a Kubernetes spoke.
func SpokeScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(jobsetv1alpha2.AddToScheme(s))
	utilruntime.Must(lwsv1.AddToScheme(s))
	return s
}

// SpokeClusterOptions are the options of the agent's view of its spoke
// for a target of backend kind. Of the remote work's kind (JobSets or
// LeaderWorkerSets) it caches only what trainyard made
// (backends.RemoteLabels): a spoke shared with other users may hold
// thousands, and each of their updates would cost the agent a decode.
// Reads of one by name fall back to the API server (kubework.Get), so
// another's object of the name a Dispatch wants is still seen, and
// refused. Pods stay cluster-wide: the capacity reading counts the GPUs of
// every pod. No cached object keeps its managed fields.
func SpokeClusterOptions(kind backends.Kind) cluster.Option {
	return func(co *cluster.Options) {
		co.Scheme = SpokeScheme()
		co.Cache.DefaultTransform = cache.TransformStripManagedFields()
		own := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{backends.LabelManagedBy: backends.ManagedByValue})}
		switch kind {
		case backends.KindJobSet:
			co.Cache.ByObject = map[client.Object]cache.ByObject{&jobsetv1alpha2.JobSet{}: own}
		case backends.KindLeaderWorkerSet:
			co.Cache.ByObject = map[client.Object]cache.ByObject{&lwsv1.LeaderWorkerSet{}: own}
		}
	}
}

// NewKubernetesAgent builds the agent of a Kubernetes spoke. It reads its
// Target from the hub for the agent namespace, the prefix of the spoke's
// tenant namespaces, the pod policy (Pod Security level, allowed pod
// fields, egress allowance) and the topology levels, so an administrator
// configures a spoke in one place. Changes of the pod policy and egress
// allowance apply at once (setupTargetSettings); of the agent namespace,
// prefix, backend and topology levels when the agent restarts.
func NewKubernetesAgent(ctx context.Context, hubCfg *rest.Config, o KubernetesOptions) (ctrl.Manager, error) {
	hubCfg, spokeCfg := withRate(hubCfg, o.QPS, o.Burst), withRate(o.Spoke, o.QPS, o.Burst)
	spokeCfg.Wrap(metrics.CountRequests(metrics.SystemSpoke)) // the agent's load on the spoke's API server
	direct, err := client.New(hubCfg, client.Options{Scheme: HubScheme()})
	if err != nil {
		return nil, err
	}
	t, err := readTarget(ctx, direct, o.Target, v1alpha1.TargetTypeKubernetes)
	if err != nil {
		return nil, err
	}
	ns := t.Spec.Agent.Namespace
	mgr, err := newAgentManager(hubCfg, t, managerOptions{metricsAddr: o.MetricsAddr, probeAddr: o.ProbeAddr, pprofAddr: o.PprofAddr, leaderElect: o.LeaderElect,
		skipNameValidation: o.SkipNameValidation, leaseDuration: o.Agent.LeaseDuration, election: o.Election})
	if err != nil {
		return nil, err
	}
	kind, err := backends.For(&t.Spec)
	if err != nil {
		return nil, fmt.Errorf("target %s: %w", t.Name, err)
	}
	logs, err := kubernetes.NewForConfig(spokeCfg)
	if err != nil {
		return nil, err
	}
	// Before the cache: it fails, less clearly, on a kind it cannot map.
	if err := requireKind(logs.Discovery(), t.Name, kind); err != nil {
		return nil, err
	}
	spoke, err := cluster.New(spokeCfg, SpokeClusterOptions(kind))
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(spoke); err != nil {
		return nil, err
	}
	opts := o.Agent
	opts.Target, opts.Namespace = t.Name, ns
	opts.Caches = append(opts.Caches, spoke.GetCache())
	if opts.FenceRecord, err = fenceRecordOf(o.LeaderElect, o.Election, t.Name); err != nil {
		return nil, err
	}
	k := t.Spec.Kubernetes
	settings := kubework.SettingsOf(&t.Spec)
	binding, err := tenantBinding(ctx, logs, o.TenantRole)
	if err != nil {
		return nil, err
	}
	var access *kubework.StatusAccess
	if o.Status != nil {
		if access, err = setupKubeStatus(mgr, spokeCfg, t.Name, o.Status, &opts); err != nil {
			return nil, err
		}
	}
	switch kind {
	case backends.KindLeaderWorkerSet:
		opts.Backend = lws.New(spoke.GetClient(), lws.Options{
			Namespace: k.Namespace, Policy: settings.Policy, Egress: settings.Egress, Binding: binding, TopologyLevels: k.TopologyLevels,
			LiveReader: spoke.GetAPIReader(), Logs: logs, Status: access,
		})
		// A LeaderWorkerSet's job ends in its pods' container statuses.
		opts.RemoteEvents = append(opts.RemoteEvents,
			source.Kind(spoke.GetCache(), &lwsv1.LeaderWorkerSet{}, handler.TypedEnqueueRequestsFromMapFunc(dispatchOfRemote[*lwsv1.LeaderWorkerSet])),
			source.Kind(spoke.GetCache(), &corev1.Pod{}, handler.TypedEnqueueRequestsFromMapFunc(dispatchOfRemote[*corev1.Pod])))
	case backends.KindJobSet:
		opts.Backend = jobset.New(spoke.GetClient(), jobset.Options{
			Namespace: k.Namespace, Policy: settings.Policy, Egress: settings.Egress, Binding: binding, TopologyLevels: k.TopologyLevels,
			LiveReader: spoke.GetAPIReader(), Logs: logs, Status: access,
		})
		opts.RemoteEvents = append(opts.RemoteEvents, source.Kind(spoke.GetCache(), &jobsetv1alpha2.JobSet{},
			handler.TypedEnqueueRequestsFromMapFunc(dispatchOfRemote[*jobsetv1alpha2.JobSet])))
	default:
		return nil, fmt.Errorf("target %s: a Kubernetes agent cannot run the %s backend", t.Name, kind)
	}
	if err := setupTargetSettings(mgr, t.Name, opts.Backend.(SettingsUpdater), settings); err != nil {
		return nil, err
	}
	return mgr, Setup(mgr, opts)
}

// tenantBinding is role bound to the agent's own spoke identity, which the
// spoke's API server names (SelfSubjectReview); nil without a role.
func tenantBinding(ctx context.Context, cs kubernetes.Interface, role string) (*kubework.TenantBinding, error) {
	if role == "" {
		return nil, nil
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("ask the spoke who the agent is, to bind %s in tenant namespaces: %w", role, err)
	}
	user := review.Status.UserInfo.Username
	if user == "" {
		return nil, fmt.Errorf("the spoke names no user for the agent, to bind %s in tenant namespaces", role)
	}
	return &kubework.TenantBinding{ClusterRole: role, Subject: rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}, nil
}

// requireKind fails unless the spoke serves the kind of remote work the
// backend makes: without it the agent's informer would wait forever for a
// kind that does not exist.
func requireKind(spoke discovery.DiscoveryInterface, target string, kind backends.Kind) error {
	var gvk schema.GroupVersionKind
	var install string
	switch kind {
	case backends.KindLeaderWorkerSet:
		gvk, install = lwsv1.SchemeGroupVersion.WithKind("LeaderWorkerSet"), "LeaderWorkerSet v0.8"
	case backends.KindJobSet:
		gvk, install = jobsetv1alpha2.SchemeGroupVersion.WithKind("JobSet"), "JobSet v0.11"
	default:
		return nil
	}
	resources, err := spoke.ServerResourcesForGroupVersion(gvk.GroupVersion().String())
	if err == nil && !slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool { return r.Kind == gvk.Kind }) {
		err = fmt.Errorf("%s serves no %s", gvk.GroupVersion(), gvk.Kind)
	}
	if err != nil {
		return fmt.Errorf("target %s runs jobs as %ss, but its spoke does not serve %s %s (install %s or later there): %w",
			target, gvk.Kind, gvk.GroupVersion(), gvk.Kind, install, err)
	}
	return nil
}

// readTarget reads the agent's Target and checks it is of the agent's type.
func readTarget(ctx context.Context, hub client.Reader, name string, typ v1alpha1.TargetType) (*v1alpha1.Target, error) {
	var t v1alpha1.Target
	if err := hub.Get(ctx, client.ObjectKey{Name: name}, &t); err != nil {
		return nil, fmt.Errorf("read target %s from the hub: %w", name, err)
	}
	if t.Spec.Type != typ {
		return nil, fmt.Errorf("target %s is of type %s, not %s", t.Name, t.Spec.Type, typ)
	}
	if (typ == v1alpha1.TargetTypeKubernetes && t.Spec.Kubernetes == nil) || (typ == v1alpha1.TargetTypeSlurm && t.Spec.Slurm == nil) {
		return nil, fmt.Errorf("target %s has no spec.%s", t.Name, strings.ToLower(string(typ)))
	}
	return &t, nil
}

type managerOptions struct {
	metricsAddr, probeAddr, pprofAddr string
	leaderElect, skipNameValidation   bool
	// leaseDuration is the agent's lease on the hub (Options.LeaseDuration).
	leaseDuration time.Duration
	election      Election
}

// Election is where an agent's replicas elect their leader. In the
// cluster the agent runs in (the chart's default: the pod's own cluster
// and namespace), a hub outage or a cut to the hub never costs the leader
// its leadership: a leader that lost it would exit, and a process that
// cannot read its Target from the hub cannot start again, so nothing would
// be left to stop the work of a Requeue target when its fence deadline
// came. On the hub (Config nil) the election is timed to ride out short
// hub outages (leaderElection).
type Election struct {
	// Config of the cluster that holds the lock; nil: the hub.
	Config *rest.Config
	// Namespace of the lock; empty: the pod's namespace (in a cluster), or
	// the agent namespace on the hub.
	Namespace string
}

// fenceRecordOf is the replicas' shared record of fence stops, beside
// their lock when they elect in their own cluster; nil when they elect on
// the hub, where a cut leaves nothing shared in reach.
func fenceRecordOf(leaderElect bool, e Election, target string) (*FenceRecord, error) {
	if !leaderElect || e.Config == nil || e.Namespace == "" {
		return nil, nil
	}
	c, err := client.New(e.Config, client.Options{Scheme: SpokeScheme()})
	if err != nil {
		return nil, fmt.Errorf("client of the leader-election cluster: %w", err)
	}
	return &FenceRecord{Client: c, Namespace: e.Namespace, Name: FenceRecordName(target)}, nil
}

// leaderElection times an election held on the hub after the lease: a
// leader rides out a hub outage shorter than the lease plus
// leadershipSlack, and a standby takes over from a leader that died in
// lease plus twice that.
func leaderElection(lease time.Duration) (leaseDuration, renewDeadline time.Duration) {
	if lease == 0 {
		lease = DefaultLeaseDuration
	}
	return lease + 2*leadershipSlack, lease + leadershipSlack
}

// leadershipSlack: see leaderElection.
const leadershipSlack = 10 * time.Second

// newAgentManager builds the hub-side manager of an agent: it may only
// read its own namespace on the hub, and its Target by name (uncached, as
// are Secrets): no cluster-wide informers.
func newAgentManager(hubCfg *rest.Config, t *v1alpha1.Target, o managerOptions) (ctrl.Manager, error) {
	ns := t.Spec.Agent.Namespace
	hubCfg = rest.CopyConfig(hubCfg)
	hubCfg.Wrap(metrics.CountWriteErrors) // failed writes to the hub, in api_write_errors_total
	leDuration, leRenew := leaderElection(o.leaseDuration)
	electionNS := ns
	var electionCfg *rest.Config
	if o.election.Config != nil {
		// controller-runtime's timing (15 s lease, 10 s renew deadline):
		// a hub outage cannot reach this lock.
		electionCfg, electionNS = o.election.Config, o.election.Namespace
		leDuration, leRenew = 15*time.Second, 10*time.Second
	}
	mgr, err := ctrl.NewManager(hubCfg, ctrl.Options{
		LeaseDuration:        &leDuration,
		RenewDeadline:        &leRenew,
		LeaderElectionConfig: electionCfg,
		Scheme:               HubScheme(),
		// No cached object keeps its managed fields: the agent never reads
		// them, and a status update without them leaves them as they are.
		Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}},
			DefaultTransform: cache.TransformStripManagedFields()},
		Client:                  client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&v1alpha1.Target{}, &corev1.Secret{}}}},
		Metrics:                 metricsserver.Options{BindAddress: orOff(o.metricsAddr)},
		HealthProbeBindAddress:  orOff(o.probeAddr),
		PprofBindAddress:        orOff(o.pprofAddr),
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        "trainyard-agent-" + t.Name,
		LeaderElectionNamespace: electionNS,
		// A replica that stops gracefully hands leadership over at once;
		// its remote work keeps running and the successor adopts it.
		LeaderElectionReleaseOnCancel: true,
		Controller:                    config.Controller{SkipNameValidation: ptr.To(o.skipNameValidation)},
	})
	if err != nil {
		return nil, err
	}
	_ = mgr.AddHealthzCheck("healthz", healthz.Ping)
	_ = mgr.Add(&metrics.AgentState{Reader: mgr.GetClient(), Namespace: ns, Target: t.Name})
	return mgr, nil
}

// dispatchOfRemote maps remote work to the Dispatch that made it.
func dispatchOfRemote[T client.Object](_ context.Context, o T) []reconcile.Request {
	l := o.GetLabels()
	if l[v1alpha1.LabelDispatchName] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{
		Namespace: l[v1alpha1.LabelDispatchNamespace], Name: l[v1alpha1.LabelDispatchName]}}}
}

func withRate(cfg *rest.Config, qps float32, burst int) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = qps, burst
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = DefaultQPS, DefaultBurst
	}
	return cfg
}

func orOff(addr string) string {
	if addr == "" {
		return "0"
	}
	return addr
}

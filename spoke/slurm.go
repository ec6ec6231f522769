package spoke

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/slurm"
	"github.com/trainyard-dev/trainyard/internal/metrics"
	"github.com/trainyard-dev/trainyard/spoke/statusapi"
)

// DefaultSlurmPollInterval is how often the agent lists the cluster's jobs
// to notice state changes: slurmrestd has no watch.
const DefaultSlurmPollInterval = 2 * time.Second

// SlurmOptions configure an agent for a Slurm cluster.
type SlurmOptions struct {
	Target                 string
	MetricsAddr, ProbeAddr string
	// PprofAddr serves Go's /debug/pprof; empty or "0" serves none.
	PprofAddr   string
	LeaderElect bool
	// Election is where the replicas elect their leader (nil: the hub).
	Election Election
	QPS      float32
	Burst    int
	// ServiceUser reads jobs and nodes and cancels jobs. Default: "slurm"
	// (the usual SlurmUser) with a signing key; the token's own user with
	// a token.
	ServiceUser string
	// PollInterval of the job listing (default DefaultSlurmPollInterval).
	PollInterval time.Duration
	// OutputRoot is where the cluster's filesystem (the jobs' working
	// directories) is visible to the agent, for `trainyard logs`; empty
	// turns logs off.
	OutputRoot string
	// HTTPClient talks to slurmrestd (default: 30 s timeout).
	HTTPClient *http.Client
	Agent      Options
	// Status, when set, serves Trainer's status API to the jobs and gives
	// each job the environment that points it there.
	Status *statusapi.EndpointOptions
	// StatusPod is this replica's pod in the Election's namespace and
	// cluster; when set, the elected replica's pod carries
	// LabelStatusLeader, which the chart's Service selects.
	StatusPod string
	// SkipNameValidation lets a process build the same agent twice.
	SkipNameValidation bool
}

// NewSlurmAgent builds the agent of a Slurm cluster. Its Target on the hub
// names the slurmrestd endpoint, API version, credential, partitions and
// accounts; the agent re-reads it on every use, so edits apply at once.
func NewSlurmAgent(ctx context.Context, hubCfg *rest.Config, o SlurmOptions) (ctrl.Manager, error) {
	hubCfg = withRate(hubCfg, o.QPS, o.Burst)
	direct, err := client.New(hubCfg, client.Options{Scheme: HubScheme()})
	if err != nil {
		return nil, err
	}
	t, err := readTarget(ctx, direct, o.Target, v1alpha1.TargetTypeSlurm)
	if err != nil {
		return nil, err
	}
	ns := t.Spec.Agent.Namespace
	tokens, serviceUser, err := tokenSource(ctx, direct, t, o.ServiceUser)
	if err != nil {
		return nil, err
	}
	c, err := slurm.NewClient(t.Spec.Slurm.Endpoint, t.Spec.Slurm.APIVersion, tokens, serviceUser, countedClient(o.HTTPClient))
	if err != nil {
		return nil, err
	}
	mgr, err := newAgentManager(hubCfg, t, managerOptions{metricsAddr: o.MetricsAddr, probeAddr: o.ProbeAddr, pprofAddr: o.PprofAddr, leaderElect: o.LeaderElect,
		skipNameValidation: o.SkipNameValidation, leaseDuration: o.Agent.LeaseDuration, election: o.Election})
	if err != nil {
		return nil, err
	}
	reader := mgr.GetAPIReader()
	name := t.Name
	target := newLastTarget(t, func(ctx context.Context) (*v1alpha1.Target, error) {
		var t v1alpha1.Target
		if err := reader.Get(ctx, client.ObjectKey{Name: name}, &t); err != nil {
			return nil, fmt.Errorf("read target %s: %w", name, err)
		}
		return &t, nil
	}, o.Agent.Clock)
	backend := slurm.NewBackend(c, target.Get)
	backend.OutputRoot = o.OutputRoot
	if path := t.Spec.Slurm.TopologyFile; path != "" {
		backend.Topology = func() (*slurm.Topology, error) {
			f, err := os.Open(path)
			if err != nil {
				return nil, err
			}
			defer f.Close()
			return slurm.ParseTopology(f)
		}
	}
	events := make(chan event.GenericEvent, 1024)
	poll := o.PollInterval
	if poll == 0 {
		poll = DefaultSlurmPollInterval
	}
	kick := make(chan struct{}, 1)
	if err := mgr.Add(&slurmPoller{jobs: backend, target: name, interval: poll, events: events, kick: kick}); err != nil {
		return nil, err
	}
	opts := o.Agent
	if o.Status != nil {
		reports := statusapi.NewReports(opts.ProgressInterval)
		ep, err := statusapi.NewEndpoint(*o.Status, name, mgr.GetCache(), reports, ctrl.Log.WithName("status-api"))
		if err != nil {
			return nil, err
		}
		if err := mgr.Add(ep); err != nil {
			return nil, err
		}
		backend.JobEnv = ep.JobEnv
		opts.Progress = reports
		if o.StatusPod != "" && o.Election.Config != nil {
			if err := addStatusLeaderLabel(mgr, o.Election.Config, o.Election.Namespace, o.StatusPod); err != nil {
				return nil, err
			}
		}
	}
	opts.HeartbeatKick = kick
	opts.Target, opts.Namespace, opts.Backend = name, ns, backend
	opts.RemoteEvents = append(opts.RemoteEvents, source.Channel(events, &handler.EnqueueRequestForObject{}))
	if opts.FenceRecord, err = fenceRecordOf(o.LeaderElect, o.Election, name); err != nil {
		return nil, err
	}
	return mgr, Setup(mgr, opts)
}

// countedClient is hc (default: a 30 s timeout) with every request to
// slurmrestd counted in agent_remote_requests_total.
func countedClient(hc *http.Client) *http.Client {
	out := &http.Client{Timeout: 30 * time.Second}
	if hc != nil {
		cp := *hc
		out = &cp
	}
	out.Transport = metrics.CountRequests(metrics.SystemSlurmrestd)(out.Transport)
	return out
}

// tokenSource builds the credential source the Target names. The bytes are
// read again on every renewal, so a rotated Secret or file is picked up.
func tokenSource(ctx context.Context, hub client.Reader, t *v1alpha1.Target, serviceUser string) (slurm.TokenSource, string, error) {
	a := t.Spec.Slurm.Auth
	if a == nil {
		return nil, "", fmt.Errorf("target %s has no spec.slurm.auth: the agent has no credential for slurmrestd", t.Name)
	}
	var read slurm.SecretReader
	switch {
	case a.File != "":
		path := a.File
		read = func(context.Context) ([]byte, error) { return os.ReadFile(path) }
	case a.SecretRef != nil:
		key := client.ObjectKey{Namespace: t.Spec.Agent.Namespace, Name: a.SecretRef.Name}
		field := a.SecretRef.Key
		read = func(ctx context.Context) ([]byte, error) {
			var s corev1.Secret
			if err := hub.Get(ctx, key, &s); err != nil {
				return nil, fmt.Errorf("secret %s: %w", key, err)
			}
			v, ok := s.Data[field]
			if !ok {
				return nil, fmt.Errorf("secret %s has no key %q", key, field)
			}
			return v, nil
		}
	default:
		return nil, "", fmt.Errorf("target %s: spec.slurm.auth names neither a file nor a secret", t.Name)
	}
	switch a.Type {
	case v1alpha1.SlurmAuthSigningKey:
		life := slurm.DefaultTokenLifetime
		if a.TokenLifetime != nil && a.TokenLifetime.Duration > 0 {
			life = a.TokenLifetime.Duration
		}
		if serviceUser == "" {
			serviceUser = "slurm"
		}
		return &slurm.SigningKeySource{Key: read, Lifetime: life}, serviceUser, nil
	case v1alpha1.SlurmAuthToken:
		src := &slurm.StaticTokenSource{Token: read}
		if serviceUser == "" {
			raw, err := read(ctx)
			if err != nil {
				return nil, "", fmt.Errorf("target %s: read token: %w", t.Name, err)
			}
			if serviceUser = slurm.TokenUser(string(raw)); serviceUser == "" {
				return nil, "", fmt.Errorf("target %s: the token names no user (sun claim); set the service user", t.Name)
			}
		}
		return src, serviceUser, nil
	}
	return nil, "", fmt.Errorf("target %s: unknown auth type %q", t.Name, a.Type)
}

// slurmPoller lists the cluster's jobs and wakes the Dispatch of every job
// whose state changed, standing in for the watch slurmrestd lacks.
type slurmPoller struct {
	jobs     *slurm.Backend
	target   string
	interval time.Duration
	events   chan<- event.GenericEvent
	// kick asks for a heartbeat when jobs started or ended, so the hub sees
	// the capacity they took or freed before the next interval.
	kick chan<- struct{}
	last map[string]string
}

func (p *slurmPoller) NeedLeaderElection() bool { return true }

func (p *slurmPoller) Start(ctx context.Context) error {
	every(ctx, p.interval, nil, "agent-slurm-poll", p.poll)
	return nil
}

func (p *slurmPoller) poll(ctx context.Context) error {
	jobs, err := p.jobs.ListJobs(ctx)
	if err != nil {
		return err
	}
	seen := make(map[string]string, len(jobs))
	changed := false
	for i := range jobs {
		j := &jobs[i]
		target, w, ok := slurm.ParseComment(j.Comment)
		if !ok || target != p.target {
			continue
		}
		key := w.DispatchNamespace + "/" + w.DispatchName
		state := fmt.Sprint(j.JobID, j.JobState, j.RestartCount)
		seen[key] = state
		if p.last[key] == state {
			continue
		}
		changed = true
		d := &v1alpha1.Dispatch{ObjectMeta: metav1.ObjectMeta{Namespace: w.DispatchNamespace, Name: w.DispatchName}}
		select {
		case p.events <- event.GenericEvent{Object: d}:
		case <-ctx.Done():
			return nil
		}
	}
	if changed || len(seen) != len(p.last) {
		select {
		case p.kick <- struct{}{}:
		default: // one is pending already
		}
	}
	p.last = seen
	return nil
}

package statusapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/kubeflow/trainer/v2/pkg/statusserver"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// Environment the Slurm batch scripts turn into Trainer's variables
// (KUBEFLOW_TRAINER_SERVER_URL, _TOKEN and _CA_CERT, the latter two naming
// files in the job's private directory). Tenants may not set TRAINYARD_*.
const (
	EnvURL   = "TRAINYARD_STATUS_URL"
	EnvToken = "TRAINYARD_STATUS_TOKEN"
	EnvCA    = "TRAINYARD_STATUS_CA"
)

// Defaults of EndpointOptions.
const (
	// DefaultTokenLifetime bounds how long a job's credential is accepted;
	// a job that runs longer stops reporting (its Dispatch still runs).
	DefaultTokenLifetime = 14 * 24 * time.Hour
	readTimeout          = 10 * time.Second
	idleTimeout          = 120 * time.Second
	shutdownTimeout      = 5 * time.Second
)

// EndpointOptions configure an agent's status endpoint.
type EndpointOptions struct {
	// Listen is the address the endpoint listens on (host:port).
	Listen string
	// URL is the endpoint's base URL as the compute nodes reach it
	// (https://host:port); its host is in the serving certificate.
	URL string
	// StateDir keeps the credential key and the CA across restarts.
	StateDir      string
	TokenLifetime time.Duration
	Clock         clock.PassiveClock
	// Auth, when set, replaces the agent's own credentials (SignerAuth):
	// a Kubernetes spoke's pods present projected tokens (TokenReviewAuth).
	Auth Authenticator
}

// Endpoint serves the status API over TLS and gives each job the
// environment that points its processes at it.
type Endpoint struct {
	opts   EndpointOptions
	state  *State
	signer *Signer
	server *Server
}

// NewEndpoint returns the endpoint of target, finding Dispatches in reader
// (the agent's cache, indexed by IndexDispatchUID) and keeping reports in
// reports.
func NewEndpoint(o EndpointOptions, target string, reader client.Reader, reports *Reports, log logr.Logger) (*Endpoint, error) {
	u, err := url.Parse(o.URL)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" || (u.Path != "" && u.Path != "/") {
		return nil, fmt.Errorf("status endpoint URL %q: want https://host[:port]", o.URL)
	}
	if o.StateDir == "" {
		return nil, fmt.Errorf("status endpoint: no state directory")
	}
	o.URL = strings.TrimSuffix(o.URL, "/")
	if o.TokenLifetime <= 0 {
		o.TokenLifetime = DefaultTokenLifetime
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	state, err := LoadOrCreateState(o.StateDir, []string{u.Hostname()})
	if err != nil {
		return nil, fmt.Errorf("status endpoint state: %w", err)
	}
	signer, err := NewSigner(state.Key, target)
	if err != nil {
		return nil, err
	}
	auth := o.Auth
	if auth == nil {
		auth = SignerAuth{Signer: signer, Clock: o.Clock}
	}
	return &Endpoint{opts: o, state: state, signer: signer, server: &Server{
		Target: target, Auth: auth, Dispatches: CachedDispatches{Reader: reader}, Reports: reports, Log: log, Clock: o.Clock,
	}}, nil
}

// JobEnv is the environment of d's Slurm job: where to report, with the
// credential of d's attempt and the CA to trust. The credential is never
// logged; the job's environment is readable only by its own user.
func (e *Endpoint) JobEnv(d *v1alpha1.Dispatch) []string {
	token := e.signer.Mint(d.UID, d.Spec.Attempt, e.opts.Clock.Now().Add(e.opts.TokenLifetime))
	return []string{
		EnvURL + "=" + e.opts.URL + statusserver.StatusUrl(d.Spec.Workload.Namespace, d.Spec.TrainJob.Name),
		EnvToken + "=" + token,
		EnvCA + "=" + string(e.state.CAPEM),
	}
}

// CAPEM is the CA the endpoint's certificate chains to.
func (e *Endpoint) CAPEM() []byte { return e.state.CAPEM }

// NeedLeaderElection: only the elected agent writes Dispatch status, so
// only it takes reports.
func (e *Endpoint) NeedLeaderElection() bool { return true }

// Start serves until ctx ends.
func (e *Endpoint) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", e.opts.Listen)
	if err != nil {
		return fmt.Errorf("status endpoint: %w", err)
	}
	srv := &http.Server{Handler: e.server.Handler(), TLSConfig: e.state.TLSConfig(),
		ReadTimeout: readTimeout, WriteTimeout: readTimeout, IdleTimeout: idleTimeout, MaxHeaderBytes: MaxBodyBytes}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// IndexDispatchUID is the cache index CachedDispatches finds by.
const IndexDispatchUID = "trainyard.metadata.uid"

// IndexDispatches adds IndexDispatchUID to the agent's cache.
func IndexDispatches(ctx context.Context, indexer client.FieldIndexer) error {
	return indexer.IndexField(ctx, &v1alpha1.Dispatch{}, IndexDispatchUID, func(o client.Object) []string {
		return []string{string(o.GetUID())}
	})
}

// CachedDispatches finds Dispatches in the agent's cache by UID.
type CachedDispatches struct{ Reader client.Reader }

// ByUID returns the Dispatch with uid, or nil.
func (c CachedDispatches) ByUID(ctx context.Context, uid types.UID) (*v1alpha1.Dispatch, error) {
	var list v1alpha1.DispatchList
	if err := c.Reader.List(ctx, &list, client.MatchingFields{IndexDispatchUID: string(uid)}); err != nil {
		return nil, err
	}
	if len(list.Items) != 1 {
		return nil, nil
	}
	return &list.Items[0], nil
}

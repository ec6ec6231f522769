package metrics

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Systems an agent sends requests to, the values of RemoteRequests'
// system label.
const (
	SystemSlurmrestd = "slurmrestd"
	SystemSpoke      = "spoke"
)

// RemoteRequests counts every request an agent sends to the system it runs
// work on, answered or not: the load an agent puts on slurmrestd (and so
// slurmctld) or on a spoke's API server.
var RemoteRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: namespace, Name: "agent_remote_requests_total",
	Help: "Requests an agent sent to its target's system (slurmrestd, spoke), by system, operation (path without versions and ids, or API resource) and HTTP method.",
}, []string{"system", "op", "method"})

// init registers RemoteRequests on the registry controller-runtime's
// managers serve.
func init() { ctrlmetrics.Registry.MustRegister(RemoteRequests) }

// CountRequests returns a transport wrapper (rest.Config.Wrap, or an
// http.Client's Transport) that counts each request in RemoteRequests
// under system.
func CountRequests(system string) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		if rt == nil {
			rt = http.DefaultTransport
		}
		return requests{system: system, next: rt}
	}
}

type requests struct {
	system string
	next   http.RoundTripper
}

func (r requests) RoundTrip(req *http.Request) (*http.Response, error) {
	op := Resource(req.URL.Path)
	if r.system == SystemSlurmrestd {
		op = SlurmOp(req.URL.Path)
	}
	RemoteRequests.WithLabelValues(r.system, op, req.Method).Inc()
	return r.next.RoundTrip(req)
}

// SlurmOp names a slurmrestd path without its version and ids:
// /slurm/v0.0.42/jobs is "slurm/jobs", /slurm/v0.0.42/job/17 "slurm/job",
// /slurmdb/v0.0.42/job/17 "slurmdb/job".
func SlurmOp(path string) string {
	var kept []string
	for _, seg := range strings.Split(strings.Trim(path, "/"), "/") {
		if seg == "" || strings.HasPrefix(seg, "v0.") || strings.Trim(seg, "0123456789_.+") == "" {
			continue
		}
		kept = append(kept, seg)
	}
	if len(kept) == 0 {
		return "other"
	}
	return strings.Join(kept, "/")
}

package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/spoke"
)

// apiRequests counts a kube-apiserver's requests by verb and resource
// ("PATCH workloads/status"), as its own apiserver_request_total says:
// every client of that API server counts, the bench's creates included.
type apiRequests map[string]float64

const requestsFamily = "apiserver_request_total"

// writeVerbs are the verbs (as the metric spells them: HTTP methods, and
// APPLY for server-side apply) that change state and cost etcd a write,
// unless the request was a dry run.
var writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "APPLY": true, "DELETE": true, "DELETECOLLECTION": true}

// dryRun ends the key of dry-run requests: they write nothing.
const dryRun = " (dry run)"

// parseAPIRequests reads apiserver_request_total from a /metrics text
// exposition. WATCH requests are left out: the API server counts a watch
// when it ends, so a round's count says when watches were reopened, not
// what the round cost.
func parseAPIRequests(r io.Reader) (apiRequests, error) {
	// Only the one family is parsed: the rest of an API server's
	// exposition is large and none of the round's business.
	var family strings.Builder
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		name := strings.TrimPrefix(strings.TrimPrefix(line, "# HELP "), "# TYPE ")
		if strings.HasPrefix(name, requestsFamily+" ") || strings.HasPrefix(name, requestsFamily+"{") {
			family.WriteString(line + "\n")
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(family.String()))
	if err != nil {
		return nil, err
	}
	out := apiRequests{}
	f := fams[requestsFamily]
	if f == nil {
		return out, nil
	}
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		verb := labels["verb"]
		if verb == "WATCH" || verb == "WATCHLIST" || labels["resource"] == "" {
			continue
		}
		key := verb + " " + labels["resource"]
		if s := labels["subresource"]; s != "" {
			key += "/" + s
		}
		if labels["dry_run"] != "" {
			key += dryRun
		}
		out[key] += m.GetCounter().GetValue() + m.GetUntyped().GetValue()
	}
	return out, nil
}

// readAPIRequests scrapes the /metrics of the API server cfg points at.
func readAPIRequests(ctx context.Context, cfg *rest.Config) (apiRequests, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(cfg.Host, "/")+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %s", cfg.Host, resp.Status)
	}
	return parseAPIRequests(resp.Body)
}

// since is what was counted after earlier.
func (a apiRequests) since(earlier apiRequests) apiRequests {
	out := apiRequests{}
	for k, v := range a {
		if d := v - earlier[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// perJob formats writes and the other requests (reads and dry runs) per
// job, each with its total and its parts largest first, leaving out parts
// under 0.005 per job.
func (a apiRequests) perJob(jobs int) string {
	if jobs <= 0 {
		return "-"
	}
	type part struct {
		key string
		v   float64
	}
	var writes, reads []part
	var w, r float64
	for k, v := range a {
		v /= float64(jobs)
		if isWrite(k) {
			writes, w = append(writes, part{k, v}), w+v
		} else {
			reads, r = append(reads, part{k, v}), r+v
		}
	}
	list := func(ps []part) string {
		sort.Slice(ps, func(i, j int) bool {
			if ps[i].v != ps[j].v {
				return ps[i].v > ps[j].v
			}
			return ps[i].key < ps[j].key
		})
		var s []string
		for _, p := range ps {
			if p.v >= 0.005 {
				s = append(s, fmt.Sprintf("%s %.2f", p.key, p.v))
			}
		}
		return strings.Join(s, ", ")
	}
	return fmt.Sprintf("writes %.2f (%s); reads and dry runs %.2f (%s)", w, list(writes), r, list(reads))
}

// writes is the write requests per job.
func (a apiRequests) writes(jobs int) float64 {
	var w float64
	for k, v := range a {
		if isWrite(k) {
			w += v
		}
	}
	return w / float64(max(jobs, 1))
}

// isWrite tells whether the requests counted under key wrote to etcd.
func isWrite(key string) bool {
	verb, _, _ := strings.Cut(key, " ")
	return writeVerbs[verb] && !strings.HasSuffix(key, dryRun)
}

// apiMeter reads one API server's request counts before a round, so that
// done can say what the round cost it.
type apiMeter struct {
	cfg    *rest.Config
	before apiRequests
	err    error
}

func startAPIMeter(cfg *rest.Config) *apiMeter {
	m := &apiMeter{cfg: cfg}
	m.before, m.err = readAPIRequests(context.Background(), cfg)
	return m
}

// done is the requests since the start, or the error that kept it from
// reading them.
func (m *apiMeter) done() (apiRequests, error) {
	if m.err != nil {
		return nil, m.err
	}
	now, err := readAPIRequests(context.Background(), m.cfg)
	if err != nil {
		return nil, err
	}
	return now.since(m.before), nil
}

// background are the writes a hub makes by the clock, not by the jobs:
// leader leases and the agents' Target heartbeats. They count in a
// round's cost but do not say whether its jobs' writes are done.
var background = map[string]bool{"PUT leases": true, "PUT targets/status": true, "PATCH targets/status": true, "APPLY targets/status": true}

// settleQuiet is how long the hub's job writes must stand still before a
// round's count is read: longer than an agent holds back a change of
// replica counts alone (spoke.ReplicaPace), so a write the pacing defers
// is counted, not cut off by when the round happens to end.
const settleQuiet = spoke.ReplicaPace + 5*time.Second

// settle waits until the jobs' writes to the hub api meters have stopped:
// admitted counts the round's jobs Kueue has admitted, which must reach
// n, and then the writes but background must stand still for
// settleQuiet. A round timed to the last remote arrival ends before the
// writes that follow it (the check going Ready, Kueue admitting and
// unsuspending the job, its status on the hub), and those are part of
// what a job costs: without this a side's count says how late in the
// job's life the remote object is made, not what the job cost.
func settle(b *testing.B, api *apiMeter, admitted func() (int, error), n int) {
	b.Helper()
	waitFor(b, "jobs admitted on the hub", admitted, n)
	jobWrites := func() float64 {
		now, err := readAPIRequests(context.Background(), api.cfg)
		if err != nil {
			b.Fatal(err)
		}
		var w float64
		for k, v := range now {
			if isWrite(k) && !background[k] {
				w += v
			}
		}
		return w
	}
	last, still := jobWrites(), time.Now()
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); {
		time.Sleep(time.Second)
		if w := jobWrites(); w != last {
			last, still = w, time.Now()
			continue
		}
		if time.Since(still) >= settleQuiet {
			return
		}
	}
	b.Fatalf("the hub's job writes did not stand still for %s within 3 minutes", settleQuiet)
}

// admittedWorkloads counts the Workloads in namespace ns that Kueue admitted.
func admittedWorkloads(c client.Reader, ns string) func() (int, error) {
	return func() (int, error) {
		var list kueue.WorkloadList
		if err := c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return 0, err
		}
		n := 0
		for _, wl := range list.Items {
			if apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted) {
				n++
			}
		}
		return n, nil
	}
}

// hubRequests is what api counted, failing the bench when it could not.
func hubRequests(b *testing.B, api *apiMeter) apiRequests {
	reqs, err := api.done()
	if err != nil {
		b.Fatal(err)
	}
	return reqs
}

package dashboard

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/hubview"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Defaults of Options.
const (
	DefaultReadTimeout = 10 * time.Second
	DefaultLogsTimeout = 30 * time.Second
	// defaultLogTail bounds the lines the job page asks the agent for.
	defaultLogTail = 500
)

// Options configure the dashboard's handler.
type Options struct {
	// Client reads the hub with the user's own credentials.
	Client client.Client
	// Namespace is the kubeconfig context's namespace: the job list shows
	// it alone when the user may not list TrainJobs across namespaces.
	Namespace string
	// Clock gives the time ages are computed against; default the real clock.
	Clock clock.PassiveClock
	// ReadTimeout bounds the reads of one page; LogsTimeout the wait for
	// an agent's logs answer.
	ReadTimeout, LogsTimeout time.Duration
}

type server struct {
	Options
	pages map[string]*template.Template
	// hosts are the Host headers the server answers to: its own address
	// by IP and as localhost, so another site's name that resolves to
	// 127.0.0.1 (DNS rebinding) reads nothing.
	hosts map[string]bool
}

// NewHandler serves the dashboard to a browser on addr (the listener's
// host:port).
func NewHandler(o Options, addr string) (http.Handler, error) {
	if o.Client == nil {
		return nil, errors.New("dashboard: no client")
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = DefaultReadTimeout
	}
	if o.LogsTimeout <= 0 {
		o.LogsTimeout = DefaultLogsTimeout
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dashboard address %q: %w", addr, err)
	}
	s := &server{Options: o, pages: map[string]*template.Template{},
		hosts: map[string]bool{addr: true, "127.0.0.1:" + port: true, "localhost:" + port: true}}
	for _, page := range []string{"fleet", "jobs", "job"} {
		t, err := template.New(page).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+page+".html")
		if err != nil {
			return nil, err
		}
		s.pages[page] = t
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.fleet)
	mux.HandleFunc("GET /jobs", s.jobs)
	mux.HandleFunc("GET /jobs/{namespace}/{name}", s.job)
	mux.HandleFunc("POST /jobs/{namespace}/{name}/logs", s.logs)
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	return s.guard(mux), nil
}

// guard answers only to the dashboard's own host names, refuses
// cross-site writes and sets headers that keep the pages from being framed
// or running scripts from elsewhere.
func (s *server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hosts[r.Host] {
			http.Error(w, "unknown host "+strconv.Quote(r.Host), http.StatusMisdirectedRequest)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			origin := r.Header.Get("Origin")
			if r.Header.Get("X-Trainyard") != "1" || (origin != "" && !s.hosts[trimScheme(origin)]) {
				http.Error(w, "cross-site request refused", http.StatusForbidden)
				return
			}
		}
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

func trimScheme(origin string) string {
	for _, p := range []string{"http://", "https://"} {
		if len(origin) > len(p) && origin[:len(p)] == p {
			return origin[len(p):]
		}
	}
	return origin
}

// page is what every template gets.
type page struct {
	Title string
	// Nav is the page's section for the menu: fleet or jobs.
	Nav      string
	Warnings []string
	// Error replaces the content when the hub could not be read.
	Error string
	Data  any
}

// FleetData is the fleet page: the map of targets and the quota.
type FleetData struct {
	Targets []TargetView
	Cohorts []CohortView
}

func (s *server) fleet(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.ReadTimeout)
	defer cancel()
	p := page{Title: "Fleet", Nav: "fleet"}
	jobs, warnings, err := hubview.ListJobs(ctx, s.Client, s.Namespace)
	p.Warnings = append(p.Warnings, warnings...)
	if err != nil {
		p.Warnings = append(p.Warnings, "cannot list TrainJobs: "+err.Error())
	}
	var targets v1alpha1.TargetList
	if err := s.Client.List(ctx, &targets); err != nil {
		p.Warnings = append(p.Warnings, "cannot list Targets: "+err.Error())
	}
	var cqs kueue.ClusterQueueList
	if err := s.Client.List(ctx, &cqs); err != nil {
		p.Warnings = append(p.Warnings, "cannot list ClusterQueues: "+err.Error())
	}
	p.Data = FleetData{Targets: buildFleet(targets.Items, jobs, s.Clock.Now()), Cohorts: buildQuota(cqs.Items)}
	s.render(w, r, "fleet", p, http.StatusOK)
}

func (s *server) jobs(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.ReadTimeout)
	defer cancel()
	p := page{Title: "Jobs", Nav: "jobs"}
	jobs, warnings, err := hubview.ListJobs(ctx, s.Client, s.Namespace)
	p.Warnings = warnings
	status := http.StatusOK
	if err != nil {
		p.Error, status = "cannot list TrainJobs: "+err.Error(), statusOf(err)
	}
	p.Data = buildJobs(jobs, filterFrom(r.URL.Query()), s.Clock.Now())
	s.render(w, r, "jobs", p, status)
}

func (s *server) job(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.ReadTimeout)
	defer cancel()
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	p := page{Title: ns + "/" + name, Nav: "jobs"}
	d, warnings, err := hubview.DescribeJob(ctx, s.Client, ns, name)
	p.Warnings = warnings
	status := http.StatusOK
	if err != nil {
		p.Error, status = err.Error(), statusOf(err)
	}
	p.Data = JobView{Description: d, Now: s.Clock.Now(), Progress: buildProgress(d, s.Clock.Now())}
	s.render(w, r, "job", p, status)
}

// logs asks the hub for the job's output through a LogRequest in the job's
// namespace, as `trainyard logs` does, and answers with plain text.
func (s *server) logs(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.LogsTimeout+s.ReadTimeout)
	defer cancel()
	tail := int64(defaultLogTail)
	if t, err := strconv.ParseInt(r.URL.Query().Get("tail"), 10, 64); err == nil && t > 0 {
		tail = t
	}
	logs, err := hubview.FetchLogs(ctx, s.Client, r.PathValue("namespace"), r.PathValue("name"), hubview.LogsOptions{Tail: tail, Timeout: s.LogsTimeout})
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err != nil {
		http.Error(w, err.Error(), statusOf(err))
		return
	}
	if note := logs.Note(); note != "" {
		fmt.Fprintln(w, note)
	}
	fmt.Fprint(w, logs.Text)
}

// statusOf maps a hub error to the page's HTTP status.
func statusOf(err error) int {
	switch {
	case apierrors.IsNotFound(err):
		return http.StatusNotFound
	case apierrors.IsForbidden(err):
		return http.StatusForbidden
	case apierrors.IsUnauthorized(err):
		return http.StatusUnauthorized
	}
	return http.StatusBadGateway
}

// render writes a page, or with ?partial=1 only its live content, which
// the page's script fetches every 2 s.
func (s *server) render(w http.ResponseWriter, r *http.Request, name string, p page, status int) {
	tmpl := "layout"
	if r.URL.Query().Get("partial") == "1" {
		tmpl = "live"
	}
	var buf bytes.Buffer
	if err := s.pages[name].ExecuteTemplate(&buf, tmpl, p); err != nil {
		http.Error(w, "render: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"age":       age,
	"placement": placementText,
	"remote":    (*v1alpha1.RemoteRef).String,
	"short":     shortLevel,
	"query":     filterURL,
	"dict": func(kv ...any) map[string]any {
		m := make(map[string]any, len(kv)/2)
		for i := 0; i+1 < len(kv); i += 2 {
			m[fmt.Sprint(kv[i])] = kv[i+1]
		}
		return m
	},
}

// filterURL is the job list's address with f and key set to value.
func filterURL(f JobFilter, key, value string) string {
	q := url.Values{}
	for k, v := range map[string]string{"namespace": f.Namespace, "queue": f.Queue, "target": f.Target, "phase": f.Phase} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if value == "" {
		q.Del(key)
	} else {
		q.Set(key, value)
	}
	if len(q) == 0 {
		return "/jobs"
	}
	return "/jobs?" + q.Encode()
}

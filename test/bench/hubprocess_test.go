package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/trainyard-dev/trainyard/test/harness/procs"
)

// hubProcess is the hub running as its own process, and what the bench
// reads from its /metrics endpoint once a second: the process's resident
// memory and Go heap (controller-runtime's process and Go collectors), the
// decisions that dispatched a job, and the decision and reconcile
// histograms.
type hubProcess struct {
	*procs.Process
	url string
	// pprof is the base URL of the process's /debug/pprof endpoints.
	pprof string
	// agentsPprof is each agent process's, by process name.
	agentsPprof map[string]string
	// agentsMetrics is each agent process's /metrics URL, by process name.
	agentsMetrics map[string]string

	mu      sync.Mutex
	samples []sample
	cancel  context.CancelFunc
	ended   chan struct{}
}

type sample struct {
	at         time.Time
	rss, heap  float64
	dispatched float64
	reconciles float64
	cost       hubCost
}

// record starts sampling every period until stop.
func (h *hubProcess) record(ctx context.Context, period time.Duration) *hubProcess {
	ctx, h.cancel = context.WithCancel(ctx)
	h.ended = make(chan struct{})
	go func() {
		defer close(h.ended)
		for {
			if s, err := h.scrape(ctx); err == nil {
				h.mu.Lock()
				h.samples = append(h.samples, s)
				h.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(period):
			}
		}
	}()
	return h
}

func (h *hubProcess) stop() {
	h.cancel()
	<-h.ended
}

func (h *hubProcess) scrape(ctx context.Context) (sample, error) {
	all, err := scrapeFamilies(ctx, h.url)
	if err != nil {
		return sample{}, err
	}
	return sample{
		at:         time.Now(),
		rss:        sum(all, "process_resident_memory_bytes", nil),
		heap:       sum(all, "go_memstats_heap_inuse_bytes", nil),
		dispatched: sum(all, "trainyard_dispatches_total", map[string]string{"result": "dispatched"}),
		reconciles: sum(all, "controller_runtime_reconcile_total", map[string]string{"controller": "trainyard-dispatch"}),
		cost:       hubCostOf(all),
	}, nil
}

// scrapeFamilies reads the metric families a /metrics URL serves.
func scrapeFamilies(ctx context.Context, url string) ([]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	all := make([]*dto.MetricFamily, 0, len(fams))
	for _, f := range fams {
		all = append(all, f)
	}
	return all, nil
}

// withAgentPasses adds each agent's reconcile passes by controller to c,
// as <agent>/<controller>.
func (h *hubProcess) withAgentPasses(ctx context.Context, c hubCost) (hubCost, error) {
	for name, url := range h.agentsMetrics {
		fams, err := scrapeFamilies(ctx, url)
		if err != nil {
			return c, err
		}
		for controller, v := range byLabel(fams, "controller_runtime_reconcile_total", "controller") {
			c.passes[name+"/"+controller] = v
		}
	}
	return c, nil
}

// sum adds the gauge and counter values of a family's matching series.
func sum(families []*dto.MetricFamily, name string, labels map[string]string) float64 {
	var v float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if matches(m, labels) {
				v += m.GetGauge().GetValue() + m.GetCounter().GetValue() + m.GetUntyped().GetValue()
			}
		}
	}
	return v
}

func (h *hubProcess) last() sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.samples) == 0 {
		return sample{}
	}
	return h.samples[len(h.samples)-1]
}

func (h *hubProcess) peakRSS() float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var peak float64
	for _, s := range h.samples {
		peak = max(peak, s.rss)
	}
	return peak
}

// waitDispatched waits until the hub has dispatched n jobs, failing if it
// exits or dispatches none for timeout: the deadline moves with progress,
// so a slower machine takes longer but a stall still fails.
func (h *hubProcess) waitDispatched(b *testing.B, n int, timeout time.Duration, diagnose func() string) {
	deadline, last := time.Now().Add(timeout), h.last().dispatched
	for int(h.last().dispatched) < n {
		if now := h.last().dispatched; now > last {
			deadline, last = time.Now().Add(timeout), now
		}
		if !h.Running() {
			b.Fatalf("the hub exited:\n%s", h.LogTail(3000))
		}
		if time.Now().After(deadline) {
			b.Fatalf("hub dispatched %.0f of %d, none more in %s\n%s", h.last().dispatched, n, timeout, diagnose())
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// window is one stretch of decisions: from and to count dispatched jobs.
type window struct {
	from, to   int
	start, end time.Time
	before     hubCost
	after      hubCost
}

func (w window) rate() float64 { return float64(w.to-w.from) / w.end.Sub(w.start).Seconds() }

// windows cuts the samples at first (the jobs placed at once), then every
// size decisions; the first window starts at t0.
// The second window starts no earlier than resumed: when the bench held
// the decisions back after the first (jobs waiting for room until it
// completes the first ones), that wait is not the hub's.
func (h *hubProcess) windows(t0 time.Time, first, size int, resumed time.Time) []window {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.samples) == 0 {
		return nil
	}
	var out []window
	cur := window{from: 0, to: first, start: t0, before: h.samples[0].cost}
	for _, s := range h.samples {
		if int(s.dispatched) < cur.to {
			continue
		}
		cur.end, cur.after = s.at, s.cost
		out = append(out, cur)
		cur = window{from: cur.to, to: cur.to + size, start: s.at, before: s.cost}
		if len(out) == 1 && resumed.After(s.at) {
			cur.start, cur.before = resumed, h.costAtLocked(resumed)
		}
	}
	return out
}

// costAtLocked is the hub's cost as the last sample at or before t read it.
func (h *hubProcess) costAtLocked(t time.Time) hubCost {
	c := h.samples[0].cost
	for _, s := range h.samples {
		if s.at.After(t) {
			break
		}
		c = s.cost
	}
	return c
}

func mib(bytes float64) string { return fmt.Sprintf("%.0f MiB", bytes/(1<<20)) }

// histogramIn sums the matching series of a histogram family.
func histogramIn(families []*dto.MetricFamily, name string, labels map[string]string) hist {
	var h hist
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				if matches(m, labels) {
					h.add(m.GetHistogram())
				}
			}
		}
	}
	return h
}

// costCells are the p99s of what the hub spent between two readings.
func costCells(before, after hubCost) []string {
	d, r := after.decision.since(before.decision), after.reconcile.since(before.reconcile)
	return []string{ms(d.quantile(0.99)), ms(r.quantile(0.99))}
}

// profile saves a CPU profile of the next d of the hub's work to path, in
// the background: the bench's artifacts keep where the hub's CPU went
// (go tool pprof -top path). wait returns once it is saved (or ctx ended)
// and logs what went wrong, from the benchmark's goroutine.
func (h *hubProcess) profile(ctx context.Context, b *testing.B, path string, d time.Duration) (wait func()) {
	return profileOf(ctx, b, h.pprof, path, d)
}

// profileAll saves a CPU profile of the next d of the hub's and each
// agent's work to dir/<process>-<label>.pprof, as profile does.
func (h *hubProcess) profileAll(ctx context.Context, b *testing.B, dir, label string, d time.Duration) (wait func()) {
	waits := []func(){h.profile(ctx, b, filepath.Join(dir, "hub-"+label+".pprof"), d)}
	for name, url := range h.agentsPprof {
		waits = append(waits, profileOf(ctx, b, url, filepath.Join(dir, name+"-"+label+".pprof"), d))
	}
	return func() {
		for _, w := range waits {
			w()
		}
	}
}

func profileOf(ctx context.Context, b *testing.B, pprof, path string, d time.Duration) (wait func()) {
	failed := make(chan error, 1)
	go func() { failed <- saveProfile(ctx, pprof, path, d) }()
	return func() {
		if err := <-failed; err != nil {
			b.Logf("profile %s: %v", path, err)
		}
	}
}

func saveProfile(ctx context.Context, pprof, path string, d time.Duration) error {
	url := fmt.Sprintf("%s/profile?seconds=%d", pprof, int(d.Seconds()))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

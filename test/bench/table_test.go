package bench

import (
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// table collects the rows every benchmark of the run measures; TestMain
// prints it once, after all of them.
var table struct {
	mu   sync.Mutex
	rows [][]string
}

// row adds one line to the table: what was measured, then its figures.
func row(cells ...string) {
	table.mu.Lock()
	defer table.mu.Unlock()
	table.rows = append(table.rows, cells)
}

// header: the hub's two figures are percentiles over the round, of a
// decision with its writes (trainyard_decision_duration_seconds) and of
// one dispatch-controller pass (controller_runtime_reconcile_time_seconds);
// the agents' load is their requests to slurmrestd or the spokes' API
// servers over the round (agentload_test.go); the side-by-side rows time
// each job from its create on the hub to its remote JobSet (arrivals_test.go),
// and the scale rows put what has no column of its own in the notes.
var header = []string{"measure", "jobs", "seconds", "jobs/s", "ratio", "decision+writes p99", "reconcile p99",
	"agent requests/s to slurmrestd or spoke API", "to remote p50", "to remote p95", "notes"}

func TestMain(m *testing.M) {
	code := m.Run()
	printTable()
	os.Exit(code)
}

func printTable() {
	table.mu.Lock()
	defer table.mu.Unlock()
	if len(table.rows) == 0 {
		return
	}
	var b strings.Builder
	b.WriteString("\n| " + strings.Join(header, " | ") + " |\n|")
	for range header {
		b.WriteString(" --- |")
	}
	b.WriteString("\n")
	for _, r := range table.rows {
		cells := append(append([]string{}, r...), make([]string, max(0, len(header)-len(r)))...)
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	fmt.Print(b.String())
}

// histograms reads a histogram family of the process's controller-runtime
// registry (where the hub's metrics and controller-runtime's own live),
// summed over the series whose labels match.
func histogram(name string, labels map[string]string) hist {
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return hist{}
	}
	return histogramIn(families, name, labels)
}

func matches(m *dto.Metric, labels map[string]string) bool {
	for k, v := range labels {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == k && l.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// hist is a cumulative histogram: bucket upper bounds and counts.
type hist struct {
	count  uint64
	sum    float64
	bounds []float64
	cum    []uint64
}

func (h *hist) add(p *dto.Histogram) {
	if p == nil {
		return
	}
	h.count += p.GetSampleCount()
	h.sum += p.GetSampleSum()
	for i, b := range p.GetBucket() {
		if i >= len(h.bounds) {
			h.bounds = append(h.bounds, b.GetUpperBound())
			h.cum = append(h.cum, 0)
		}
		h.cum[i] += b.GetCumulativeCount()
	}
}

// since is what was observed after earlier.
func (h hist) since(earlier hist) hist {
	out := hist{count: h.count - earlier.count, sum: h.sum - earlier.sum, bounds: h.bounds}
	for i := range h.cum {
		var e uint64
		if i < len(earlier.cum) {
			e = earlier.cum[i]
		}
		out.cum = append(out.cum, h.cum[i]-e)
	}
	return out
}

// quantile interpolates linearly inside the bucket that holds q.
func (h hist) quantile(q float64) float64 {
	if h.count == 0 {
		return math.NaN()
	}
	rank := q * float64(h.count)
	i := sort.Search(len(h.cum), func(i int) bool { return float64(h.cum[i]) >= rank })
	if i == len(h.cum) {
		return h.bounds[len(h.bounds)-1]
	}
	lo, below := 0.0, uint64(0)
	if i > 0 {
		lo, below = h.bounds[i-1], h.cum[i-1]
	}
	in := h.cum[i] - below
	if in == 0 {
		return h.bounds[i]
	}
	return lo + (h.bounds[i]-lo)*(rank-float64(below))/float64(in)
}

// hubCost is the hub's decision and dispatch-reconcile histograms and
// its reconcile passes by controller, to be read before and after a round.
type hubCost struct {
	decision, reconcile hist
	passes              map[string]float64
}

func readHubCost() hubCost {
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return hubCost{}
	}
	return hubCostOf(families)
}

// hubCostOf reads a hubCost from gathered or scraped families.
func hubCostOf(families []*dto.MetricFamily) hubCost {
	return hubCost{
		decision:  histogramIn(families, "trainyard_decision_duration_seconds", nil),
		reconcile: histogramIn(families, "controller_runtime_reconcile_time_seconds", map[string]string{"controller": "trainyard-dispatch"}),
		passes:    byLabel(families, "controller_runtime_reconcile_total", "controller"),
	}
}

// byLabel sums a counter family's series by the value of one label.
func byLabel(families []*dto.MetricFamily, name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// passesPerJob formats the reconcile passes each controller made between
// before and after, per job, most first: what each write a job makes wakes.
func passesPerJob(before, after hubCost, n int) string {
	type pass struct {
		controller string
		perJob     float64
	}
	var all []pass
	for c, v := range after.passes {
		if d := v - before.passes[c]; d > 0 {
			all = append(all, pass{c, d / float64(n)})
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].perJob != all[j].perJob {
			return all[i].perJob > all[j].perJob
		}
		return all[i].controller < all[j].controller
	})
	parts := make([]string, 0, len(all))
	for _, p := range all {
		parts = append(parts, fmt.Sprintf("%s %.2f", p.controller, p.perJob))
	}
	return strings.Join(parts, ", ")
}

// cells formats what the hub spent between before and now: decision p99
// and reconcile p99.
func (before hubCost) cells() []string {
	now := readHubCost()
	d, r := now.decision.since(before.decision), now.reconcile.since(before.reconcile)
	return []string{ms(d.quantile(0.99)), ms(r.quantile(0.99))}
}

func ms(s float64) string {
	if math.IsNaN(s) {
		return "-"
	}
	return fmt.Sprintf("%.1f ms", s*1e3)
}

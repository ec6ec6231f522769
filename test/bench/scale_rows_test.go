package bench

import (
	"strings"
	"testing"
	"time"
)

// TestScaleWindows checks how the scale bench cuts the hub's samples into
// windows of decisions and turns them into rows, on made-up samples: no
// cluster runs.
func TestScaleWindows(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	h := &hubProcess{}
	// 10 decisions a second for 40 s, one sample a second.
	for i := 0; i <= 40; i++ {
		h.samples = append(h.samples, sample{at: t0.Add(time.Duration(i) * time.Second), dispatched: float64(10 * i), rss: float64(i) * (1 << 20)})
	}
	ws := h.windows(t0, 100, 150, time.Time{})
	if len(ws) != 3 {
		t.Fatalf("got %d windows, want 3 (0-100, 100-250, 250-400): %+v", len(ws), ws)
	}
	want := [][2]int{{0, 100}, {100, 250}, {250, 400}}
	for i, w := range ws {
		if w.from != want[i][0] || w.to != want[i][1] {
			t.Errorf("window %d is %d-%d, want %d-%d", i, w.from, w.to, want[i][0], want[i][1])
		}
		if r := w.rate(); r < 9.9 || r > 10.1 {
			t.Errorf("window %d rate %.2f, want 10", i, r)
		}
	}
	if got := h.peakRSS(); got != 40*(1<<20) {
		t.Errorf("peak RSS %.0f, want 40 MiB", got)
	}

	// Decisions held back after the first window: the second starts when
	// they resume.
	held := &hubProcess{}
	for i := 0; i <= 40; i++ {
		n := min(10*i, 100)
		if i >= 20 {
			n = 100 + 10*(i-20)
		}
		held.samples = append(held.samples, sample{at: t0.Add(time.Duration(i) * time.Second), dispatched: float64(n)})
	}
	hw := held.windows(t0, 100, 100, t0.Add(20*time.Second))
	if len(hw) != 3 || !hw[1].start.Equal(t0.Add(20*time.Second)) {
		t.Fatalf("held windows %+v, want the second to start when decisions resumed", hw)
	}
	if r := hw[1].rate(); r < 9.9 || r > 10.1 {
		t.Errorf("rate after resuming %.2f, want 10", r)
	}

	table.mu.Lock()
	saved := table.rows
	table.rows = nil
	table.mu.Unlock()
	defer func() { table.mu.Lock(); table.rows = saved; table.mu.Unlock() }()
	scaleRows(scaleReport{total: 400, slots: 100, queued: 300, windows: ws, peak: h.peakRSS(), end: h.last(),
		quiet: quietWindow{took: time.Minute, writes: 18, reconciles: 36}})
	if len(table.rows) != 5 {
		t.Fatalf("got %d rows, want 5", len(table.rows))
	}
	for _, r := range table.rows {
		if len(r) != len(header) {
			t.Errorf("row %q has %d cells, the header %d", r[0], len(r), len(header))
		}
	}
	if got := table.rows[2][4]; got != "1.00" {
		t.Errorf("end/start ratio %q, want 1.00", got)
	}
	if got := table.rows[4][len(header)-1]; !strings.HasPrefix(got, "at most 2.00 dispatch reconciles per Target status write") {
		t.Errorf("fan-out note %q", got)
	}
}

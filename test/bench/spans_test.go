package bench

import (
	"fmt"
	"sort"
	"time"
)

// span is when one job ran: from its start to its end (zero while it
// still runs).
type span struct{ start, end time.Time }

// meanRunning is the number of jobs running, averaged over [from, to):
// the time each span overlaps the window, summed, over the window's
// length. A span without an end runs past to; one without a start never ran.
func meanRunning(spans []span, from, to time.Time) float64 {
	if !to.After(from) {
		return 0
	}
	var busy time.Duration
	for _, s := range spans {
		if s.start.IsZero() {
			continue
		}
		start, end := s.start, s.end
		if start.Before(from) {
			start = from
		}
		if end.IsZero() || end.After(to) {
			end = to
		}
		if end.After(start) {
			busy += end.Sub(start)
		}
	}
	return busy.Seconds() / to.Sub(from).Seconds()
}

// quantile is the q-quantile of v (nearest rank, rounding up; v is
// sorted in place), false when v is empty.
func quantile(v []float64, q float64) (float64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	sort.Float64s(v)
	return v[min(len(v)-1, int(q*float64(len(v))))], true
}

// secondsQuantile formats quantile q of v as seconds, "-" when v is empty.
func secondsQuantile(v []float64, q float64) string {
	x, ok := quantile(v, q)
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.2f s", x)
}

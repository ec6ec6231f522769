package dispatch

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/trainyard-dev/trainyard/hub/placement"
)

func TestLedgerCountsOnlyWhatTheCacheHasNotShown(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	l := newLedger()
	a := []placement.Reservation{{Node: "n1", GPUs: 8}}
	l.add("ns/a", "spoke1", 8, a, t0)
	l.add("ns/b", "spoke1", 4, []placement.Reservation{{Node: "n2", GPUs: 4}}, t0)
	l.add("ns/c", "spoke2", 2, nil, t0.Add(-2*ledgerTTL))

	got, nodes := l.inFlight(map[string]bool{"ns/b": true}, t0.Add(time.Second))
	if diff := cmp.Diff(map[string]int64{"spoke1": 8}, got); diff != "" {
		t.Errorf("in flight (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string][]placement.Reservation{"spoke1": a}, nodes); diff != "" {
		t.Errorf("in flight on nodes (-want +got):\n%s", diff)
	}
	// Seen and stale entries are dropped for good.
	if diff := cmp.Diff([]string{"ns/a"}, keys(l.pending)); diff != "" {
		t.Errorf("left in the ledger (-want +got):\n%s", diff)
	}
	if got, _ := l.inFlight(nil, t0.Add(2*ledgerTTL)); len(got) != 0 {
		t.Errorf("stale reservation still counted: %v", got)
	}
}

func keys(m map[string]reservation) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

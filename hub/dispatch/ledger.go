package dispatch

import (
	"sync"
	"time"

	"github.com/trainyard-dev/trainyard/hub/placement"
)

// ledger makes placement decisions atomic. Workers place concurrently and
// read Dispatches from an informer cache, which may not yet hold one another
// worker has just created; without the ledger two decisions could book the
// same GPUs. Placement holds the ledger's lock from choosing a target until
// the new Dispatch is recorded, and each decision counts the Dispatches the
// ledger knows of that the cache has not shown yet.
type ledger struct {
	mu      sync.Mutex
	pending map[string]reservation // by Dispatch namespace/name
}

type reservation struct {
	target string
	gpus   int64
	// nodes are the GPUs the decision booked on each node, when known.
	nodes []placement.Reservation
	at    time.Time
}

// ledgerTTL bounds how long a reservation waits for the cache; a watch is
// seconds behind at worst, so an entry this old is stale.
const ledgerTTL = time.Minute

func newLedger() *ledger { return &ledger{pending: map[string]reservation{}} }

// inFlight returns the GPUs per target, and those booked on known nodes, of
// reservations the cache has not shown yet, dropping those it has (seen)
// or that are stale.
func (l *ledger) inFlight(seen map[string]bool, now time.Time) (map[string]int64, map[string][]placement.Reservation) {
	gpus, nodes := map[string]int64{}, map[string][]placement.Reservation{}
	for key, r := range l.pending {
		if seen[key] || now.Sub(r.at) > ledgerTTL {
			delete(l.pending, key)
			continue
		}
		gpus[r.target] += r.gpus
		nodes[r.target] = append(nodes[r.target], r.nodes...)
	}
	return gpus, nodes
}

func (l *ledger) add(key, target string, gpus int64, nodes []placement.Reservation, now time.Time) {
	l.pending[key] = reservation{target: target, gpus: gpus, nodes: nodes, at: now}
}

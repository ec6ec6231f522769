package dispatch

import (
	"sync"
	"time"
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
	at     time.Time
}

// ledgerTTL bounds how long a reservation waits for the cache; a watch is
// seconds behind at worst, so an entry this old is stale.
const ledgerTTL = time.Minute

func newLedger() *ledger { return &ledger{pending: map[string]reservation{}} }

// inFlight returns the GPUs per target of reservations the cache has not
// shown yet, dropping those it has (seen) or that are stale.
func (l *ledger) inFlight(seen map[string]bool, now time.Time) map[string]int64 {
	out := map[string]int64{}
	for key, r := range l.pending {
		if seen[key] || now.Sub(r.at) > ledgerTTL {
			delete(l.pending, key)
			continue
		}
		out[r.target] += r.gpus
	}
	return out
}

func (l *ledger) add(key, target string, gpus int64, now time.Time) {
	l.pending[key] = reservation{target: target, gpus: gpus, at: now}
}

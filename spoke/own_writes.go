package spoke

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// ownWrites remembers, per Dispatch, the resourceVersions the agent's own
// writes replaced since its cache last showed the Dispatch. A pass that
// reads one of them from the cache works from a copy older than what the
// agent itself wrote: its status write would conflict and its events would
// repeat. The watch event of the agent's write is still to come and queues
// the Dispatch again, so such a pass can end at once without losing a
// wake-up.
type ownWrites struct {
	mu       sync.Mutex
	replaced map[types.NamespacedName]map[string]bool
}

// wrote records that a write replaced version rv of the Dispatch key.
func (w *ownWrites) wrote(key types.NamespacedName, rv string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.replaced == nil {
		w.replaced = map[types.NamespacedName]map[string]bool{}
	}
	if w.replaced[key] == nil {
		w.replaced[key] = map[string]bool{}
	}
	w.replaced[key][rv] = true
}

// behind reports whether the cached version rv of key predates one of the
// agent's own writes. A version that does not is the cache catching up (or
// another writer's, later still): what was remembered for key is dropped.
func (w *ownWrites) behind(key types.NamespacedName, rv string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.replaced[key][rv] {
		return true
	}
	delete(w.replaced, key)
	return false
}

// forget drops what was remembered of a Dispatch that is gone.
func (w *ownWrites) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.replaced, key)
}

package spoke

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// ReplicaPace is how often, at most, a change of a Dispatch's replica
// counts alone (pods bound, ready, finished) is written. Each such write
// is a Dispatch write on the hub and, mirrored into the TrainJob's
// jobsStatus, a TrainJob write too; most come within seconds of a phase
// change, which carries the latest counts anyway. A failure count that
// grows, and every other change, is written at once.
const ReplicaPace = 30 * time.Second

// replicaPacer remembers when the agent last wrote each Dispatch's status.
type replicaPacer struct {
	mu   sync.Mutex
	last map[types.NamespacedName]time.Time
}

// hold keeps old's replica counts in status when they are all that
// changed and the last write of key was less than ReplicaPace ago. It
// returns how long until they may be written (0: not deferred).
func (p *replicaPacer) hold(key types.NamespacedName, old, status *v1alpha1.DispatchStatus, now time.Time) time.Duration {
	if !onlyCountsChanged(old, status) {
		return 0
	}
	if noProgress(old.Replicas) && noProgress(status.Replicas) {
		// Counts that are all zero say nothing none did (a JobSet's
		// first status, before any pod exists): nothing to write, now
		// or later.
		status.Replicas = old.Replicas
		return 0
	}
	p.mu.Lock()
	last, ok := p.last[key]
	p.mu.Unlock()
	wait := ReplicaPace - now.Sub(last)
	if !ok || wait <= 0 {
		return 0
	}
	status.Replicas = old.Replicas
	return wait
}

// wrote records a status write of key at now.
func (p *replicaPacer) wrote(key types.NamespacedName, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		p.last = map[types.NamespacedName]time.Time{}
	}
	p.last[key] = now
}

// forget drops a Dispatch that is gone or final.
func (p *replicaPacer) forget(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.last, key)
}

// noProgress: no replica is active, ready or finished, or none is listed.
func noProgress(rs []v1alpha1.ReplicaStatus) bool {
	for _, r := range rs {
		if r.Active != 0 || r.Ready != 0 || r.Succeeded != 0 || r.Failed != 0 {
			return false
		}
	}
	return true
}

// onlyCountsChanged reports whether status differs from old in its
// replica counts alone, with no pod set's failures grown.
func onlyCountsChanged(old, status *v1alpha1.DispatchStatus) bool {
	if equality.Semantic.DeepEqual(old.Replicas, status.Replicas) {
		return false
	}
	failed := map[string]int32{}
	for _, r := range old.Replicas {
		failed[r.Name] = r.Failed
	}
	for _, r := range status.Replicas {
		if r.Failed > failed[r.Name] {
			return false
		}
	}
	rest := status.DeepCopy()
	rest.Replicas, rest.ObservedAttempt = old.Replicas, old.ObservedAttempt
	return equality.Semantic.DeepEqual(old, rest)
}

package spoke

import (
	"context"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// How the Slurm agent reads its Target when the hub may be out of reach.
const (
	// targetReadTimeout bounds one read of the Target from the hub.
	targetReadTimeout = 2 * time.Second
	// targetRetryAfter: after a read failed for want of the hub, reads
	// answer from the last copy for this long without asking the hub.
	targetRetryAfter = 5 * time.Second
)

// lastTarget reads the agent's Target from the hub on every use, so edits
// apply at once, and keeps the last copy it read. When the hub cannot be
// reached (a read errs or takes longer than targetReadTimeout) it answers
// with that copy, and for targetRetryAfter does not wait on the hub again:
// an agent cut off from its hub must still list and cancel its jobs at its
// fence deadline, at once and without the hub, before the hub requeues
// them elsewhere. A Target that is gone, or that the agent may not read,
// is an error, never an old copy.
type lastTarget struct {
	read  func(context.Context) (*v1alpha1.Target, error)
	clock clock.PassiveClock

	mu       sync.Mutex
	last     *v1alpha1.Target
	failedAt time.Time
}

func newLastTarget(first *v1alpha1.Target, read func(context.Context) (*v1alpha1.Target, error), c clock.PassiveClock) *lastTarget {
	if c == nil {
		c = clock.RealClock{}
	}
	return &lastTarget{read: read, clock: c, last: first.DeepCopy()}
}

// Get returns the Target as the hub has it now, or the last copy read
// while the hub is out of reach.
func (l *lastTarget) Get(ctx context.Context) (*v1alpha1.Target, error) {
	l.mu.Lock()
	last, failedAt := l.last, l.failedAt
	l.mu.Unlock()
	if last != nil && !failedAt.IsZero() && l.clock.Since(failedAt) < targetRetryAfter {
		return last.DeepCopy(), nil
	}
	rctx, cancel := context.WithTimeout(ctx, targetReadTimeout)
	defer cancel()
	t, err := l.read(rctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		l.last, l.failedAt = t.DeepCopy(), time.Time{}
		return t, nil
	case last == nil || ctx.Err() != nil || apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return nil, err
	}
	if l.failedAt.IsZero() {
		log.FromContext(ctx).Info("the hub is out of reach: using the last Target read", "target", last.Name, "error", err.Error())
	}
	l.failedAt = l.clock.Now()
	return last.DeepCopy(), nil
}

package spoke

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/internal/metrics"
)

// Fence deletes remote work whose Dispatch no longer exists or belongs to
// another attempt. That is stale work: the hub requeued the job while this
// agent was away, or deleted the Dispatch of a lost target without it. It
// runs at start and then at a fixed interval.
type Fence struct {
	Hub       client.Reader
	Namespace string
	Lister    backends.RemoteLister
	Interval  time.Duration
}

// Start runs until ctx ends; it is a manager Runnable.
func (f *Fence) Start(ctx context.Context) error {
	every(ctx, f.Interval, nil, "agent-fence", func(ctx context.Context) error {
		_, err := f.Sweep(ctx)
		return err
	})
	return nil
}

// NeedLeaderElection: only the elected agent replica deletes.
func (f *Fence) NeedLeaderElection() bool { return true }

// Sweep deletes stale remote work once and reports how much it deleted.
func (f *Fence) Sweep(ctx context.Context) (int, error) {
	works, err := f.Lister.ListRemote(ctx)
	if err != nil {
		return 0, err
	}
	deleted := 0
	for _, w := range works {
		if w.DispatchNamespace != f.Namespace {
			continue // not ours to judge
		}
		var d v1alpha1.Dispatch
		err := f.Hub.Get(ctx, client.ObjectKey{Namespace: w.DispatchNamespace, Name: w.DispatchName}, &d)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return deleted, err
		case d.Spec.Attempt == w.Attempt:
			continue // live
		}
		log.FromContext(ctx).Info("deleting stale remote work", "remote", w.Ref.Name, "dispatch", w.DispatchName, "attempt", w.Attempt)
		if err := f.Lister.Delete(ctx, w); err != nil {
			return deleted, err
		}
		deleted++
		metrics.FenceDeleted()
	}
	return deleted, nil
}

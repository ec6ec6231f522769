package targets

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// probeInterval paces the hub's probe of its own API server.
const probeInterval = 2 * time.Second

// sightProbe reads the hub's identity namespace live at probeInterval, so
// the lease judgement knows when the hub itself could not observe: its API
// server frozen, overloaded, restarting or cut off. Leases cannot be seen
// renewed then, and that time is not an agent's silence (as the node
// lifecycle controller does not judge nodes from a period it could not
// observe). It runs on the elected hub replica, beside the judgement.
type sightProbe struct {
	reader  client.Reader
	clock   clock.Clock
	tracker *tracker
}

func (p *sightProbe) Start(ctx context.Context) error {
	t := time.NewTicker(probeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, probeInterval)
		err := p.reader.Get(pctx, client.ObjectKey{Name: IdentityNamespace}, &corev1.Namespace{})
		cancel()
		if err != nil {
			continue
		}
		if ended, blind := p.tracker.sighted(p.clock.Now()); ended {
			log.FromContext(ctx).Info("the hub sees its API server again: every agent's lease counts from now", "blind", blind.Round(time.Second).String())
		}
	}
}

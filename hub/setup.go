package hub

import (
	"time"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/trainyard-dev/trainyard/hub/admissioncheck"
	"github.com/trainyard-dev/trainyard/hub/dispatch"
	"github.com/trainyard-dev/trainyard/hub/targets"
)

// Options configure the hub controllers.
type Options struct {
	// LostTargetTimeout is how long an agent may be silent before its
	// target's Dispatches are requeued elsewhere.
	LostTargetTimeout time.Duration
	// Concurrency of the dispatch controller.
	Concurrency int
	Clock       clock.Clock
}

// Setup registers every hub controller with mgr.
func Setup(mgr ctrl.Manager, opts Options) error {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if err := (&admissioncheck.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&targets.Reconciler{Client: mgr.GetClient(), Clock: opts.Clock, LostTimeout: opts.LostTargetTimeout}).SetupWithManager(mgr); err != nil {
		return err
	}
	d := dispatch.NewReconciler(mgr.GetClient(), mgr.GetEventRecorderFor("trainyard-dispatcher"), opts.Clock,
		dispatch.Options{Concurrency: opts.Concurrency})
	return d.SetupWithManager(mgr)
}

package hub

import (
	"context"
	"time"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/trainyard-dev/trainyard/hub/admissioncheck"
	"github.com/trainyard-dev/trainyard/hub/dispatch"
	"github.com/trainyard-dev/trainyard/hub/kueuejob"
	"github.com/trainyard-dev/trainyard/hub/snapshot"
	"github.com/trainyard-dev/trainyard/hub/targets"
	"github.com/trainyard-dev/trainyard/hub/tenantview"
)

// Options configure the hub controllers.
type Options struct {
	// Lease judges the agents' leases: duration, grace before a requeue,
	// and the disruption threshold (targets.Default* when zero).
	Lease targets.LeaseSettings
	// Concurrency of the dispatch controller.
	Concurrency int
	Clock       clock.Clock
	// PinnedRuntimeGracePeriod is how long an unreferenced pinned runtime
	// copy is kept (default snapshot.DefaultGCGracePeriod).
	PinnedRuntimeGracePeriod time.Duration
}

// The hub's RBAC, generated into config/rbac/hub by `make generate`. The
// dispatch suite runs the hub with exactly this role, so a missing verb fails
// a test rather than a production install. The admission policies it relies
// on (hub/snapshot.PinnedRuntimePolicy, tenantview.RequesterPolicy,
// targets.DispatchWriterPolicy) ship as objects of the chart and
// config/hub: the hub may read the requester policy, to fail closed
// without it, and may not create or change any.
// ConfigMaps it reads anywhere (Trainer's runtime snapshots beside the
// TrainJobs, the agents' log answers) and deletes only in agent namespaces,
// under the Role of targets.AgentRBAC (the answers, once relayed).
//
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=workloads,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=workloads/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=admissionchecks,verbs=get;list;watch
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=clusterqueues,verbs=get;list;watch
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=admissionchecks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=trainer.kubeflow.org,resources=trainjobs,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=trainer.kubeflow.org,resources=trainjobs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=trainer.kubeflow.org,resources=clustertrainingruntimes,verbs=get;list;watch
// +kubebuilder:rbac:groups=trainer.kubeflow.org,resources=trainingruntimes,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=trainyard.dev,resources=targets,verbs=get;list;watch
// +kubebuilder:rbac:groups=trainyard.dev,resources=targets/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=trainyard.dev,resources=dispatches,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups=trainyard.dev,resources=logrequests,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=trainyard.dev,resources=logrequests/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies;validatingadmissionpolicybindings,verbs=get,resourceNames=trainyard-logrequest-requester
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Setup registers every hub controller with mgr.
func Setup(mgr ctrl.Manager, opts Options) error {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if err := kueuejob.SetupWithManager(context.Background(), mgr); err != nil {
		return err
	}
	if err := (&admissioncheck.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&targets.Reconciler{Client: mgr.GetClient(), Clock: opts.Clock, Lease: opts.Lease}).SetupWithManager(mgr); err != nil {
		return err
	}
	gc := &snapshot.GC{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Clock: opts.Clock, GracePeriod: opts.PinnedRuntimeGracePeriod}
	if err := gc.SetupWithManager(mgr); err != nil {
		return err
	}
	relay := &tenantview.Relay{Client: mgr.GetClient(), Answers: mgr.GetAPIReader(), Clock: opts.Clock}
	if err := relay.SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&tenantview.Summarizer{Client: mgr.GetClient(), Clock: opts.Clock}).SetupWithManager(mgr); err != nil {
		return err
	}
	d := dispatch.NewReconciler(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorderFor("trainyard-dispatcher"), opts.Clock,
		dispatch.Options{Concurrency: opts.Concurrency})
	return d.SetupWithManager(mgr)
}

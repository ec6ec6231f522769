package kueuejob

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kueue/pkg/controller/jobframework"
	kueuetrainjob "sigs.k8s.io/kueue/pkg/controller/jobs/trainjob"

	"github.com/trainyard-dev/trainyard/backends/jobset"
	"github.com/trainyard-dev/trainyard/hub/snapshot"
)

// ExternalFramework is how Kueue's configuration names the TrainJob
// integration the hub serves, in integrations.externalFrameworks; Kueue's
// own TrainJob framework (kueuetrainjob.FrameworkName) must be off in
// integrations.frameworks, or two controllers would drive each TrainJob.
const ExternalFramework = "TrainJob.v1alpha1.trainer.kubeflow.org"

// The hub drives TrainJobs' Workloads as Kueue's job reconciler does.
//
// +kubebuilder:rbac:groups=trainer.kubeflow.org,resources=trainjobs,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=trainer.kubeflow.org,resources=trainjobs/finalizers,verbs=get;update
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=workloads,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=workloads/finalizers,verbs=update
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=workloadpriorityclasses;resourceflavors;topologies,verbs=get;list;watch
// +kubebuilder:rbac:groups=scheduling.k8s.io,resources=priorityclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// SetupWithManager runs Kueue's job reconciler for TrainJobs on mgr, with
// opts as Kueue's own configuration would give them.
func SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts ...jobframework.Option) error {
	// Kueue's pod sets look the runtime's kind up in Trainer's registry.
	if err := jobset.InitTrainerRuntimes(); err != nil {
		return fmt.Errorf("trainer runtimes for Kueue's TrainJob pod sets: %w", err)
	}
	if err := kueuetrainjob.SetupIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	// Its writes carry a field manager of their own: the keep-pin webhook
	// lets only its suspends of admitted jobs through (snapshot.KeepPin).
	c := client.WithFieldOwner(mgr.GetClient(), snapshot.KueueFieldManager)
	r, err := jobframework.NewGenericReconcilerFactory(newJobWithCache(newPodSetCache(podSetCacheSize)), skipTrainyardWrites)(ctx, c, mgr.GetFieldIndexer(),
		mgr.GetEventRecorder("trainyard-kueue-trainjob"), opts...)
	if err != nil {
		return err
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	return (&UnpinnedReporter{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("trainyard-kueue-trainjob")}).SetupWithManager(mgr)
}

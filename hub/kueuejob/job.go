// Package kueuejob is Kueue's TrainJob integration as the hub runs it.
//
// Kueue v0.19's built-in TrainJob integration computes a job's pod sets
// from the live runtime its spec.runtimeRef names, on every reconcile, and
// evicts the job when they change. trainyard pins each job's runtime at
// submission (hub/snapshot) but must leave runtimeRef as the user wrote it:
// GitOps tools re-apply manifests constantly, and a rewritten runtimeRef
// never matches. So Kueue's built-in TrainJob framework is turned off and
// TrainJob is one of Kueue's external frameworks, served by the hub: the
// hub runs Kueue's own job reconciler (jobframework) over TrainJob, a
// wrapper of Kueue's own TrainJob type that differs only where Kueue reads
// the runtime. There it hands Kueue a copy of the job whose runtimeRef
// names the pinned copy, and keeps the user's runtimeRef on the real
// object. A job without a pin gets no pod sets at all.
package kueuejob

import (
	"context"
	"errors"
	"fmt"
	"slices"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/kueue/pkg/controller/jobframework"
	kueuetrainjob "sigs.k8s.io/kueue/pkg/controller/jobs/trainjob"
	"sigs.k8s.io/kueue/pkg/podset"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/snapshot"
)

// TrainJob is Kueue's TrainJob with the runtime read from the pinned copy.
// Everything not overridden here (Finished, IsActive, Suspend, managedBy…)
// is Kueue's.
type TrainJob struct {
	kueuetrainjob.TrainJob
	// podSets, when set, keeps the pod sets computed for a generation.
	podSets *podSetCache
}

var (
	_ jobframework.GenericJob             = (*TrainJob)(nil)
	_ jobframework.JobWithCustomStop      = (*TrainJob)(nil)
	_ jobframework.JobWithReclaimablePods = (*TrainJob)(nil)
	_ jobframework.JobWithManagedBy       = (*TrainJob)(nil)
)

// NewJob returns an empty TrainJob for the reconciler to load into.
func NewJob() jobframework.GenericJob {
	return &TrainJob{}
}

// newJobWithCache is NewJob whose jobs share one pod-set cache.
func newJobWithCache(c *podSetCache) func() jobframework.GenericJob {
	return func() jobframework.GenericJob { return &TrainJob{podSets: c} }
}

// FromObject wraps a copy of tj.
func FromObject(tj *trainer.TrainJob) *TrainJob {
	return &TrainJob{TrainJob: *asKueue(tj)}
}

// asKueue views tj as Kueue's TrainJob (the same struct type).
func asKueue(tj *trainer.TrainJob) *kueuetrainjob.TrainJob {
	return (*kueuetrainjob.TrainJob)(tj)
}

// trainJob is the job as Trainer's type.
func (t *TrainJob) trainJob() *trainer.TrainJob {
	return (*trainer.TrainJob)(&t.TrainJob)
}

// PodSets are Kueue's pod sets of the job run with its pinned runtime.
func (t *TrainJob) PodSets(ctx context.Context, c client.Client) ([]kueue.PodSet, error) {
	// The pin annotations name the copy exactly: its source and hash.
	var pin string
	if _, err := snapshot.PinnedRef(t.trainJob()); err == nil {
		pin = t.Annotations[v1alpha1.AnnotationRuntimeSource] + "@" + t.Annotations[v1alpha1.AnnotationRuntimeHash]
	}
	if ps, ok := t.podSets.get(t.UID, t.Generation, pin); ok && pin != "" {
		return ps, nil
	}
	view, err := t.pinnedView(ctx, c)
	if err != nil {
		return nil, err
	}
	ps, err := view.PodSets(ctx, c)
	if err != nil {
		return nil, err
	}
	if pin != "" {
		t.podSets.put(t.UID, t.Generation, pin, ps)
	}
	return ps, nil
}

// RunWithPodSetsInfo is Kueue's, run on the pinned view. Kueue writes its
// runtime patch (node selectors, tolerations of the admitted flavors) with
// an update while the job is still suspended, and its reconciler then
// patches the job to unsuspend it: two writes. Here the update is held
// back (deferUpdate) and the view's changes come back to t, but for
// runtimeRef and trainer, which only the view has pinned, so Kueue's one
// patch carries both the runtime patch and the unsuspend. Trainer allows
// a runtime patch to change in the request that unsuspends a job.
func (t *TrainJob) RunWithPodSetsInfo(ctx context.Context, c client.Client, infos []podset.PodSetInfo) error {
	view, err := t.pinnedView(ctx, c)
	if err != nil {
		return err
	}
	// Kueue's webhook added its patch at creation; trainyard adds it only
	// now, so the user's spec stays as written until Kueue admits the job.
	ensureKueuePatch(view)
	if err := view.RunWithPodSetsInfo(ctx, deferUpdate{Client: c, job: t.UID}, infos); err != nil {
		return err
	}
	t.adopt(view)
	return nil
}

// Stop is Kueue's, which needs Kueue's runtime patch to restore; a job
// stopped before it ever ran has none yet.
func (t *TrainJob) Stop(ctx context.Context, c client.Client, infos []podset.PodSetInfo, reason jobframework.StopReason, msg string) (bool, error) {
	ensureKueuePatch(&t.TrainJob)
	return t.TrainJob.Stop(ctx, c, infos, reason, msg)
}

// PodsReady is Kueue's on the pinned view; a job without a pin is not ready.
func (t *TrainJob) PodsReady(ctx context.Context, c client.Client) bool {
	view, err := t.pinnedView(ctx, c)
	if err != nil {
		return false
	}
	return view.PodsReady(ctx, c)
}

// ReclaimablePods is Kueue's on the pinned view. Kueue asks on every pass
// over a job; only succeeded pods are reclaimable, so while none has
// succeeded there are none, and the view (Trainer's runtime framework run
// on the pinned copy) is not built for nothing.
func (t *TrainJob) ReclaimablePods(ctx context.Context, c client.Client) ([]kueue.ReclaimablePod, error) {
	if !slices.ContainsFunc(t.Status.JobsStatus, func(js trainer.JobStatus) bool { return ptr.Deref(js.Succeeded, 0) > 0 }) {
		return nil, nil
	}
	view, err := t.pinnedView(ctx, c)
	if err != nil {
		return nil, err
	}
	return view.ReclaimablePods(ctx, c)
}

// pinnedView is a copy of t as the hub runs it (snapshot.WithPinnedRuntime),
// read with the pinned copy's spec. A job that is not pinned, or whose copy
// is gone, gets an error Kueue does not retry: a pin is set only at
// creation, and no later event can give the job one.
func (t *TrainJob) pinnedView(ctx context.Context, c client.Reader) (*kueuetrainjob.TrainJob, error) {
	ref, err := snapshot.PinnedRef(t.trainJob())
	if err != nil {
		return nil, jobframework.UnretryableError(err.Error())
	}
	var rt trainer.TrainingRuntime
	if err := c.Get(ctx, client.ObjectKey{Namespace: t.Namespace, Name: ref.Name}, &rt); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, fmt.Errorf("%w: pinned copy %s of %s: %v", snapshot.ErrRuntimeNotFound, ref.Name, t.Annotations[v1alpha1.AnnotationRuntimeSource], err)
		}
		return nil, err
	}
	view, err := snapshot.WithPinnedRuntime(t.trainJob(), &rt.Spec)
	if err != nil {
		return nil, err
	}
	return asKueue(view), nil
}

// adopt takes view's changes into t, keeping t's runtimeRef and trainer.
func (t *TrainJob) adopt(view *kueuetrainjob.TrainJob) {
	ref, tr := t.Spec.RuntimeRef, t.Spec.Trainer
	t.TrainJob = *view
	t.Spec.RuntimeRef, t.Spec.Trainer = ref, tr
}

// ensureKueuePatch adds Kueue's runtime patch, empty, if the job has none:
// what Kueue's TrainJob webhook adds at creation.
func ensureKueuePatch(t *kueuetrainjob.TrainJob) {
	for _, p := range t.Spec.RuntimePatches {
		if p.Manager == v1alpha1.KueueRuntimePatchManager {
			return
		}
	}
	t.Spec.RuntimePatches = append(t.Spec.RuntimePatches, trainer.RuntimePatch{
		Manager: v1alpha1.KueueRuntimePatchManager,
		TrainingRuntimeSpec: &trainer.TrainingRuntimeSpecPatch{
			Template: &trainer.JobSetTemplatePatch{Spec: &trainer.JobSetSpecPatch{}},
		},
	})
}

// errNotTheJob: the pinned view's client was asked to update another object.
var errNotTheJob = errors.New("the pinned view of a TrainJob updates only that TrainJob")

// deferUpdate is a client for Kueue's code running on the pinned view of
// one TrainJob: it reads as c does, but its update of that job is not
// sent; the caller's patch writes the view's changes.
type deferUpdate struct {
	client.Client
	job types.UID
}

// Update sends nothing: the job's changes stay in obj for the caller.
func (c deferUpdate) Update(_ context.Context, obj client.Object, _ ...client.UpdateOption) error {
	if tj, ok := obj.(*trainer.TrainJob); !ok || tj.UID != c.job {
		return errNotTheJob
	}
	return nil
}

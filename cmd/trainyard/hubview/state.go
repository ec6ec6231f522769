package hubview

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// Kueue states a TrainJob shows when no live Dispatch describes it.
const (
	StatePending  = "Pending"
	StateAdmitted = "Admitted"
	StateFinished = "Finished"
)

// Job is what the hub knows about one TrainJob: its Kueue Workload and
// the Dispatches of that Workload. An Index makes it.
type Job struct {
	TrainJob *trainer.TrainJob
	// Workload is nil until Kueue has made it.
	Workload *kueue.Workload
	// Dispatches are every Dispatch of the Workload still stored, by attempt.
	Dispatches []v1alpha1.Dispatch
	// Live is the current attempt's Dispatch, as the hub's dispatcher
	// picks it; it points into Dispatches.
	Live *v1alpha1.Dispatch
}

// Index joins TrainJobs to their Workloads and Dispatches.
type Index struct {
	workloads  map[types.UID][]*kueue.Workload // by owning TrainJob UID
	dispatches map[types.UID][]v1alpha1.Dispatch
}

// NewIndex indexes Workloads by their owning TrainJob and Dispatches by
// their Workload.
func NewIndex(wls []kueue.Workload, ds []v1alpha1.Dispatch) *Index {
	ix := &Index{workloads: map[types.UID][]*kueue.Workload{}, dispatches: map[types.UID][]v1alpha1.Dispatch{}}
	for i := range wls {
		for _, o := range wls[i].OwnerReferences {
			if o.Kind == trainer.TrainJobKind && o.APIVersion == trainer.GroupVersion.String() {
				ix.workloads[o.UID] = append(ix.workloads[o.UID], &wls[i])
			}
		}
	}
	for _, d := range ds {
		uid := d.Spec.Workload.UID
		ix.dispatches[uid] = append(ix.dispatches[uid], d)
	}
	return ix
}

// Job returns what the index knows about tj.
func (ix *Index) Job(tj *trainer.TrainJob) Job {
	s := Job{TrainJob: tj, Workload: newestWorkload(ix.workloads[tj.UID])}
	if s.Workload == nil {
		return s
	}
	s.Dispatches = slices.Clone(ix.dispatches[s.Workload.UID])
	slices.SortFunc(s.Dispatches, func(a, b v1alpha1.Dispatch) int { return int(a.Spec.Attempt - b.Spec.Attempt) })
	s.Live = liveDispatch(s.Workload, s.Dispatches)
	return s
}

// newestWorkload picks the Workload Kueue works on: not being deleted, the
// newest of several.
func newestWorkload(wls []*kueue.Workload) *kueue.Workload {
	var best *kueue.Workload
	for _, wl := range wls {
		switch {
		case best == nil:
			best = wl
		case best.DeletionTimestamp.IsZero() != wl.DeletionTimestamp.IsZero():
			if wl.DeletionTimestamp.IsZero() {
				best = wl
			}
		case best.CreationTimestamp.Before(&wl.CreationTimestamp):
			best = wl
		}
	}
	return best
}

// liveDispatch is the Dispatch of the Workload's current attempt (its
// trainyard.dev/attempt annotation) that is not being deleted, as the hub's
// dispatcher sees it. Without the annotation it is the latest attempt.
// dispatches are sorted by attempt.
func liveDispatch(wl *kueue.Workload, dispatches []v1alpha1.Dispatch) *v1alpha1.Dispatch {
	attempt, err := strconv.Atoi(wl.Annotations[v1alpha1.AnnotationAttempt])
	for i := len(dispatches) - 1; i >= 0; i-- {
		d := &dispatches[i]
		if !d.DeletionTimestamp.IsZero() {
			continue
		}
		if err != nil || d.Spec.Attempt == int32(attempt) {
			return d
		}
	}
	return nil
}

// Phase is the live Dispatch's phase, or the TrainJob's Kueue state when
// there is none.
func (s Job) Phase() string {
	if s.Live != nil {
		if s.Live.Status.Phase == "" {
			return string(v1alpha1.DispatchPending)
		}
		return string(s.Live.Status.Phase)
	}
	return kueueState(s.TrainJob, s.Workload)
}

// kueueState is Finished once the TrainJob or its Workload finished,
// Admitted once Kueue admitted the Workload, and Pending before.
func kueueState(tj *trainer.TrainJob, wl *kueue.Workload) string {
	if apimeta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete) ||
		apimeta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobFailed) {
		return StateFinished
	}
	if wl == nil {
		return StatePending
	}
	switch {
	case apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadFinished):
		return StateFinished
	case apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted):
		return StateAdmitted
	}
	return StatePending
}

// hubLists are the objects one command reads to join TrainJobs with their
// Workloads and Dispatches.
type hubLists struct {
	workloads  []kueue.Workload
	dispatches []v1alpha1.Dispatch
	// warnings say what could not be read; the join goes on without it.
	warnings []string
}

// listWorkloads reads the Workloads of namespace ns ("" for all). A user
// allowed to read TrainJobs but not Workloads still gets the TrainJobs, with
// a warning.
func (l *hubLists) listWorkloads(ctx context.Context, c client.Reader, ns string) error {
	var wls kueue.WorkloadList
	if err := c.List(ctx, &wls, client.InNamespace(ns)); err != nil {
		if !apierrors.IsForbidden(err) {
			return Explain(err)
		}
		l.warnings = append(l.warnings, fmt.Sprintf("cannot list Workloads (%v): phases show the TrainJobs' own state", err))
	}
	l.workloads = wls.Items
	return nil
}

// listDispatches reads the Dispatches with the given labels, in all the
// targets' agent namespaces, or warns when the user may not.
func (l *hubLists) listDispatches(ctx context.Context, c client.Reader, labels client.MatchingLabels) error {
	var ds v1alpha1.DispatchList
	if err := c.List(ctx, &ds, labels); err != nil {
		if !apierrors.IsForbidden(err) {
			return Explain(err)
		}
		l.warnings = append(l.warnings, fmt.Sprintf("cannot list Dispatches (%v): TARGET and PHASE show Kueue's state only", err))
	}
	l.dispatches = ds.Items
	return nil
}

// listWorkloadsAndDispatches reads the Workloads of namespace ns ("" for
// all) and their Dispatches.
func listWorkloadsAndDispatches(ctx context.Context, c client.Reader, ns string) (*hubLists, error) {
	l := &hubLists{}
	if err := l.listWorkloads(ctx, c, ns); err != nil {
		return nil, err
	}
	labels := client.MatchingLabels{}
	if ns != "" {
		labels[v1alpha1.LabelWorkloadNamespace] = v1alpha1.LabelValue(ns)
	}
	if err := l.listDispatches(ctx, c, labels); err != nil {
		return nil, err
	}
	if ns != "" {
		// The label selects by label value; the spec has the full namespace.
		l.dispatches = slices.DeleteFunc(l.dispatches, func(d v1alpha1.Dispatch) bool { return d.Spec.Workload.Namespace != ns })
	}
	return l, nil
}

package kueuejob

import (
	"maps"
	"slices"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// tenantViewAnnotations are what the hub's tenant view writes on a
// TrainJob (hub/tenantview): where and how it runs, for its owner. Kueue's
// job reconciler reads none of them.
var tenantViewAnnotations = []string{v1alpha1.AnnotationPlacement, v1alpha1.AnnotationProgressHistory}

// skipTenantViewWrites is a ReconcilerSetup: Kueue's job reconciler does
// not wake on a TrainJob update that changes only tenantViewAnnotations.
// The placement summary is written twice a job or more, and each pass of
// Kueue's reconciler reads the job's Workloads and pod sets to find
// nothing to do.
func skipTenantViewWrites(b *builder.Builder, _ client.Client) *builder.Builder {
	return b.WithEventFilter(notOnlyTenantView())
}

// notOnlyTenantView passes every event but a TrainJob update that changes
// only tenantViewAnnotations.
func notOnlyTenantView() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		oldJob, okOld := e.ObjectOld.(*trainer.TrainJob)
		newJob, okNew := e.ObjectNew.(*trainer.TrainJob)
		return !okOld || !okNew || !onlyTenantViewChanged(oldJob, newJob)
	}}
}

// onlyTenantViewChanged reports whether b differs from a in
// tenantViewAnnotations and nothing else Kueue's reconciler reads: spec
// (the generation), status, labels, other annotations, finalizers, owners
// and deletion.
func onlyTenantViewChanged(a, b *trainer.TrainJob) bool {
	changed := false
	for _, k := range tenantViewAnnotations {
		changed = changed || a.Annotations[k] != b.Annotations[k]
	}
	others := func(tj *trainer.TrainJob) map[string]string {
		m := maps.Clone(tj.Annotations)
		for _, k := range tenantViewAnnotations {
			delete(m, k)
		}
		return m
	}
	return changed && a.Generation == b.Generation &&
		equality.Semantic.DeepEqual(a.DeletionTimestamp, b.DeletionTimestamp) &&
		maps.Equal(a.Labels, b.Labels) && maps.Equal(others(a), others(b)) &&
		slices.Equal(a.Finalizers, b.Finalizers) &&
		equality.Semantic.DeepEqual(a.OwnerReferences, b.OwnerReferences) &&
		equality.Semantic.DeepEqual(a.Status, b.Status)
}

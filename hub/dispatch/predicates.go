package dispatch

import (
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// ignoreOwnAttemptWrites drops Workload updates that change nothing but
// the attempt annotation, which only this controller writes (with its
// finalizer on the first attempt). The Dispatch that pass creates wakes
// the next one; waking on the annotation would start it at once, past the
// rate limiter: when a Dispatch create failed, every pass wrote the
// annotation again and the Workload looped hot.
//
// It also drops the update in which a check of the Workload starts to wait
// for room (Pending, WaitingPrefix) and nothing else changes: the pass
// that wrote it recorded the Workload as waiting under the in-flight lock,
// so room freeing after it wakes it, and a pass on the write's echo would
// only fail again.
func ignoreOwnAttemptWrites() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		oldWl, okOld := e.ObjectOld.(*kueue.Workload)
		newWl, okNew := e.ObjectNew.(*kueue.Workload)
		return !okOld || !okNew || !(onlyAttemptChanged(oldWl, newWl) || onlyStartedWaiting(oldWl, newWl))
	}}
}

// onlyStartedWaiting reports whether b differs from a only in checks that
// became Pending with WaitingPrefix.
func onlyStartedWaiting(a, b *kueue.Workload) bool {
	started := map[kueue.AdmissionCheckReference]bool{}
	for _, c := range b.Status.AdmissionChecks {
		if c.State == kueue.CheckStatePending && strings.HasPrefix(c.Message, WaitingPrefix) {
			started[c.Name] = true
		}
	}
	for _, c := range a.Status.AdmissionChecks {
		if started[c.Name] && c.State == kueue.CheckStatePending && strings.HasPrefix(c.Message, WaitingPrefix) {
			delete(started, c.Name) // was waiting already: not this write
		}
	}
	if len(started) == 0 {
		return false
	}
	others := func(wl *kueue.Workload) kueue.WorkloadStatus {
		st := wl.Status // a shallow copy: only compared; DeleteFunc gets a copy of the checks
		st.AdmissionChecks = slices.DeleteFunc(slices.Clone(st.AdmissionChecks), func(c kueue.AdmissionCheckState) bool { return started[c.Name] })
		return st
	}
	return a.Generation == b.Generation &&
		equality.Semantic.DeepEqual(a.DeletionTimestamp, b.DeletionTimestamp) &&
		maps.Equal(a.Labels, b.Labels) && maps.Equal(a.Annotations, b.Annotations) &&
		slices.Equal(a.Finalizers, b.Finalizers) &&
		equality.Semantic.DeepEqual(a.OwnerReferences, b.OwnerReferences) &&
		equality.Semantic.DeepEqual(others(a), others(b))
}

func onlyAttemptChanged(a, b *kueue.Workload) bool {
	if a.Annotations[v1alpha1.AnnotationAttempt] == b.Annotations[v1alpha1.AnnotationAttempt] {
		return false
	}
	// The first attempt's write adds trainyard's finalizer too (nextAttempt).
	annA, finA := v1alpha1.WithoutTrainyardBookkeeping(a.Annotations, a.Finalizers)
	annB, finB := v1alpha1.WithoutTrainyardBookkeeping(b.Annotations, b.Finalizers)
	return a.Generation == b.Generation &&
		equality.Semantic.DeepEqual(a.DeletionTimestamp, b.DeletionTimestamp) &&
		maps.Equal(a.Labels, b.Labels) && maps.Equal(annA, annB) &&
		(!hasFinalizer(a) || hasFinalizer(b)) && slices.Equal(finA, finB) &&
		equality.Semantic.DeepEqual(a.OwnerReferences, b.OwnerReferences) &&
		equality.Semantic.DeepEqual(a.Status, b.Status)
}

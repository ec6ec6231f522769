package kueuejob

import (
	"maps"
	"slices"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// tenantViewAnnotations are what the hub's tenant view writes on a
// TrainJob (hub/tenantview): where and how it runs, for its owner. Kueue's
// job reconciler reads none of them.
var tenantViewAnnotations = []string{v1alpha1.AnnotationPlacement, v1alpha1.AnnotationProgressHistory}

// skipTrainyardWrites is a ReconcilerSetup: Kueue's job reconciler does
// not wake on a TrainJob update that changes only tenantViewAnnotations or
// status it does not read, nor on a Workload update that changes only
// trainyard's bookkeeping on it. Each pass of Kueue's reconciler reads the
// job's Workloads and pod sets; on those updates it finds nothing to do.
func skipTrainyardWrites(b *builder.Builder, _ client.Client) *builder.Builder {
	return b.WithEventFilter(notOnlyTrainyardWrites())
}

// notOnlyTrainyardWrites passes every event but a TrainJob update that
// changes nothing Kueue reads (nothingKueueReadsChanged) and a Workload
// update that changes only trainyard's bookkeeping (onlyBookkeepingChanged).
func notOnlyTrainyardWrites() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		switch oldObj := e.ObjectOld.(type) {
		case *trainer.TrainJob:
			newJob, ok := e.ObjectNew.(*trainer.TrainJob)
			return !ok || !nothingKueueReadsChanged(oldObj, newJob)
		case *kueue.Workload:
			newWl, ok := e.ObjectNew.(*kueue.Workload)
			return !ok || !onlyBookkeepingChanged(oldObj, newWl)
		}
		return true
	}}
}

// onlyBookkeepingChanged reports whether b differs from a only in what
// Kueue's job reconciler does not act on: trainyard's attempt annotation
// and finalizer, and admission check states. A check state alone changes
// nothing for the job: Kueue's workload controller turns it into the
// Admitted or Evicted condition or a deactivation, and those updates wake
// the reconciler. A new message of a Pending check is the exception: the
// reconciler relays it to the job as an UpdatedAdmissionCheck event.
func onlyBookkeepingChanged(a, b *kueue.Workload) bool {
	if equality.Semantic.DeepEqual(a.Status.AdmissionChecks, b.Status.AdmissionChecks) &&
		a.Annotations[v1alpha1.AnnotationAttempt] == b.Annotations[v1alpha1.AnnotationAttempt] &&
		slices.Equal(a.Finalizers, b.Finalizers) {
		return false // none of it changed: a resync, or another change
	}
	others := func(wl *kueue.Workload) (map[string]string, []string, kueue.WorkloadStatus) {
		ann, fin := v1alpha1.WithoutTrainyardBookkeeping(wl.Annotations, wl.Finalizers)
		st := wl.Status // a shallow copy: only compared, and the checks left out
		st.AdmissionChecks = nil
		return ann, fin, st
	}
	annA, finA, stA := others(a)
	annB, finB, stB := others(b)
	return a.Generation == b.Generation &&
		equality.Semantic.DeepEqual(a.DeletionTimestamp, b.DeletionTimestamp) &&
		maps.Equal(a.Labels, b.Labels) && maps.Equal(annA, annB) && slices.Equal(finA, finB) &&
		equality.Semantic.DeepEqual(a.OwnerReferences, b.OwnerReferences) &&
		equality.Semantic.DeepEqual(stA, stB) && !newPendingMessage(a, b)
}

// newPendingMessage reports whether b has a Pending check with a message
// that a's same check did not have.
func newPendingMessage(a, b *kueue.Workload) bool {
	had := pendingMessages(a)
	for name, msg := range pendingMessages(b) {
		if had[name] != msg {
			return true
		}
	}
	return false
}

// pendingMessages are the messages of a's Pending checks that have one,
// what Kueue's job reconciler relays to the job.
func pendingMessages(a *kueue.Workload) map[kueue.AdmissionCheckReference]string {
	out := map[kueue.AdmissionCheckReference]string{}
	for _, c := range a.Status.AdmissionChecks {
		if c.State == kueue.CheckStatePending && c.Message != "" {
			out[c.Name] = c.Message
		}
	}
	return out
}

// nothingKueueReadsChanged reports whether b differs from a only in
// tenantViewAnnotations or in status Kueue's reconciler does not read, not
// in anything it reads: spec (the generation), the jobs' status, the
// Complete and Failed conditions, labels, other annotations, finalizers,
// owners and deletion. The hub writes the others: the Created and Running
// conditions Trainer's controller would, and training progress, which a
// running job reports every 30 s or so for days.
func nothingKueueReadsChanged(a, b *trainer.TrainJob) bool {
	changed := !equality.Semantic.DeepEqual(a.Status, b.Status)
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
		equality.Semantic.DeepEqual(a.Status.JobsStatus, b.Status.JobsStatus) &&
		sameCondition(a, b, trainer.TrainJobComplete) && sameCondition(a, b, trainer.TrainJobFailed)
}

// sameCondition reports whether a and b have the same condition typ, as
// Kueue's TrainJob reads it (Finished): its status and message.
func sameCondition(a, b *trainer.TrainJob, typ string) bool {
	ca, cb := apimeta.FindStatusCondition(a.Status.Conditions, typ), apimeta.FindStatusCondition(b.Status.Conditions, typ)
	if ca == nil || cb == nil {
		return ca == cb
	}
	return ca.Status == cb.Status && ca.Message == cb.Message
}

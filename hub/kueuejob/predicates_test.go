package kueuejob

import (
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tyt "github.com/trainyard-dev/trainyard/internal/testing"
)

// TestKueueSkipsTenantViewWrites: Kueue's job reconciler does not wake on
// a TrainJob update that only rewrites the placement summary, progress
// history or status it does not read (conditions other than Complete and
// Failed, training progress), and wakes on any other change.
func TestKueueSkipsTenantViewWrites(t *testing.T) {
	base := func() *trainer.TrainJob {
		tj := tyt.MakeTrainJob("train", ns).Queue("q").Obj()
		tj.Annotations = map[string]string{v1alpha1.AnnotationRuntimeHash: "sha256:1", v1alpha1.AnnotationPlacement: `{"phase":"Submitted"}`}
		tj.Generation, tj.ResourceVersion = 2, "7"
		tj.Status.Conditions = []metav1.Condition{{Type: trainer.TrainJobComplete, Status: metav1.ConditionFalse}}
		return tj
	}
	summary := func(tj *trainer.TrainJob) {
		tj.Annotations[v1alpha1.AnnotationPlacement] = `{"phase":"Succeeded"}`
		tj.ResourceVersion = "8"
	}
	cases := map[string]tyt.UpdateCase[*trainer.TrainJob]{
		"the summary":          {Change: summary},
		"the progress history": {Change: func(tj *trainer.TrainJob) { tj.Annotations[v1alpha1.AnnotationProgressHistory] = "[]" }},
		"nothing (a resync)":   {Change: func(tj *trainer.TrainJob) {}, Pass: true},
		"the summary and the status": {Change: func(tj *trainer.TrainJob) {
			summary(tj)
			tj.Status.Conditions = []metav1.Condition{{Type: trainer.TrainJobComplete, Status: metav1.ConditionTrue}}
		}, Pass: true},
		"the Created condition": {Change: func(tj *trainer.TrainJob) {
			tj.Status.Conditions = append(tj.Status.Conditions, metav1.Condition{Type: "Created", Status: metav1.ConditionTrue})
		}},
		"training progress": {Change: func(tj *trainer.TrainJob) {
			tj.Status.TrainerStatus = &trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](40)}
		}},
		"the jobs' status": {Change: func(tj *trainer.TrainJob) {
			tj.Status.JobsStatus = []trainer.JobStatus{{Name: "node", Active: ptr.To[int32](1)}}
		}, Pass: true},
		"the Failed condition": {Change: func(tj *trainer.TrainJob) {
			tj.Status.Conditions = []metav1.Condition{{Type: trainer.TrainJobFailed, Status: metav1.ConditionTrue, Message: "x"}}
		}, Pass: true},
		"the Complete condition's message": {Change: func(tj *trainer.TrainJob) {
			tj.Status.Conditions[0].Message = "all done"
		}, Pass: true},
		"the summary and the spec": {Change: func(tj *trainer.TrainJob) { summary(tj); tj.Generation++ }, Pass: true},
		"the summary and another annotation": {Change: func(tj *trainer.TrainJob) {
			summary(tj)
			tj.Annotations[v1alpha1.AnnotationRuntimeHash] = "sha256:2"
		}, Pass: true},
		"the summary and a label":     {Change: func(tj *trainer.TrainJob) { summary(tj); tj.Labels["x"] = "y" }, Pass: true},
		"the summary and a finalizer": {Change: func(tj *trainer.TrainJob) { summary(tj); tj.Finalizers = []string{"f"} }, Pass: true},
		"the summary and deletion": {Change: func(tj *trainer.TrainJob) {
			summary(tj)
			tj.DeletionTimestamp = &metav1.Time{}
		}, Pass: true},
	}
	tyt.ExpectUpdates(t, notOnlyTrainyardWrites(), base, cases)
}

// TestKueueSkipsTrainyardBookkeeping: Kueue's job reconciler does not wake
// on a Workload update that changes only trainyard's attempt annotation,
// its finalizer or admission check states, and wakes on any other change,
// and on a new message of a Pending check, which it relays to the job.
func TestKueueSkipsTrainyardBookkeeping(t *testing.T) {
	base := func() *kueue.Workload {
		wl := &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Name: "wl", Namespace: ns, Generation: 1, ResourceVersion: "7",
			Labels: map[string]string{"l": "v"}, Annotations: map[string]string{v1alpha1.AnnotationAttempt: "1"},
			Finalizers: []string{"kueue.x-k8s.io/resource-in-use"}}}
		wl.Status.Conditions = []metav1.Condition{{Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionTrue}}
		wl.Status.AdmissionChecks = []kueue.AdmissionCheckState{{Name: "trainyard", State: kueue.CheckStatePending}}
		return wl
	}
	check := func(wl *kueue.Workload) *kueue.AdmissionCheckState { return &wl.Status.AdmissionChecks[0] }
	ready := func(wl *kueue.Workload) { check(wl).State, check(wl).Message = kueue.CheckStateReady, "running" }
	cases := map[string]tyt.UpdateCase[*kueue.Workload]{
		"the attempt":           {Change: func(wl *kueue.Workload) { wl.Annotations[v1alpha1.AnnotationAttempt] = "2" }},
		"trainyard's finalizer": {Change: func(wl *kueue.Workload) { wl.Finalizers = append(wl.Finalizers, v1alpha1.WorkloadFinalizer) }},
		"the attempt and the finalizer": {Change: func(wl *kueue.Workload) {
			wl.Annotations[v1alpha1.AnnotationAttempt] = "2"
			wl.Finalizers = append(wl.Finalizers, v1alpha1.WorkloadFinalizer)
		}},
		"the check turns Ready":       {Change: ready},
		"the check appears, no words": {Change: func(wl *kueue.Workload) { wl.Status.AdmissionChecks = nil }},
		"nothing (a resync)":          {Change: func(wl *kueue.Workload) {}, Pass: true},
		"a Pending check's message":   {Change: func(wl *kueue.Workload) { check(wl).Message = "waiting for room" }, Pass: true},
		"the check turns Ready and Admitted": {Change: func(wl *kueue.Workload) {
			ready(wl)
			wl.Status.Conditions = append(wl.Status.Conditions, metav1.Condition{Type: kueue.WorkloadAdmitted, Status: metav1.ConditionTrue})
		}, Pass: true},
		"the attempt and the spec": {Change: func(wl *kueue.Workload) {
			wl.Annotations[v1alpha1.AnnotationAttempt] = "2"
			wl.Generation++
		}, Pass: true},
		"the attempt and another annotation": {Change: func(wl *kueue.Workload) {
			wl.Annotations[v1alpha1.AnnotationAttempt], wl.Annotations["a"] = "2", "b"
		}, Pass: true},
		"the attempt and a label": {Change: func(wl *kueue.Workload) {
			wl.Annotations[v1alpha1.AnnotationAttempt], wl.Labels["l"] = "2", "w"
		}, Pass: true},
		"the check and Kueue's finalizer": {Change: func(wl *kueue.Workload) { ready(wl); wl.Finalizers = nil }, Pass: true},
		"the check and deletion": {Change: func(wl *kueue.Workload) {
			ready(wl)
			wl.DeletionTimestamp = &metav1.Time{}
		}, Pass: true},
		"the check and the owner": {Change: func(wl *kueue.Workload) {
			ready(wl)
			wl.OwnerReferences = []metav1.OwnerReference{{Name: "tj"}}
		}, Pass: true},
	}
	tyt.ExpectUpdates(t, notOnlyTrainyardWrites(), base, cases)
}

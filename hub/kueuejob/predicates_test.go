package kueuejob

import (
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tyt "github.com/trainyard-dev/trainyard/internal/testing"
)

// TestKueueSkipsTenantViewWrites: Kueue's job reconciler does not wake on
// a TrainJob update that only rewrites the placement summary or progress
// history, and wakes on any other change beside or instead of them.
func TestKueueSkipsTenantViewWrites(t *testing.T) {
	base := func() *trainer.TrainJob {
		tj := tyt.MakeTrainJob("train", ns).Queue("q").Obj()
		tj.Annotations = map[string]string{v1alpha1.AnnotationRuntimeHash: "sha256:1", v1alpha1.AnnotationPlacement: `{"phase":"Submitted"}`}
		tj.Generation, tj.ResourceVersion = 2, "7"
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
	p := notOnlyTenantView()
	tyt.ExpectUpdates(t, p, base, cases)
	wl := &kueue.Workload{}
	if !p.Update(event.UpdateEvent{ObjectOld: wl, ObjectNew: wl.DeepCopy()}) {
		t.Error("a Workload update does not wake Kueue's reconciler")
	}
}

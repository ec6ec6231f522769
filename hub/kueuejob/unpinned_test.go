package kueuejob

import (
	"context"
	"strings"
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// TestUnpinnedReporter: a queued job without a pin fails with the reason
// and an event; pinned, unqueued and finished jobs are left alone.
func TestUnpinnedReporter(t *testing.T) {
	pinned := map[string]string{v1alpha1.AnnotationRuntimeSource: "ClusterTrainingRuntime/torch", v1alpha1.AnnotationRuntimeHash: "sha256:" + strings.Repeat("ab", 32)}
	cases := map[string]struct {
		tj       *trainer.TrainJob
		wantFail bool
	}{
		"queued, unpinned": {tj: tytesting.MakeTrainJob("a", ns).Queue("q").Obj(), wantFail: true},
		"queued, pinned": {tj: func() *trainer.TrainJob {
			tj := tytesting.MakeTrainJob("a", ns).Queue("q").Obj()
			tj.Annotations = pinned
			return tj
		}()},
		"not queued": {tj: tytesting.MakeTrainJob("a", ns).Obj()},
		"finished": {tj: func() *trainer.TrainJob {
			tj := tytesting.MakeTrainJob("a", ns).Queue("q").Obj()
			tj.Status.Conditions = []metav1.Condition{{Type: trainer.TrainJobComplete, Status: metav1.ConditionTrue, Reason: "Done"}}
			return tj
		}()},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := newClient(t, tc.tj)
			rec := events.NewFakeRecorder(4)
			r := &UnpinnedReporter{Client: c, Recorder: rec}
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(tc.tj)}); err != nil {
				t.Fatalf("Reconcile: %v", err)
			}
			var got trainer.TrainJob
			if err := c.Get(ctx, client.ObjectKeyFromObject(tc.tj), &got); err != nil {
				t.Fatal(err)
			}
			failed := apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobFailed)
			if (failed != nil) != tc.wantFail {
				t.Fatalf("Failed condition %+v, want one: %v", failed, tc.wantFail)
			}
			if !tc.wantFail {
				if len(rec.Events) != 0 {
					t.Errorf("event %q for a job left alone", <-rec.Events)
				}
				return
			}
			if failed.Reason != v1alpha1.ReasonRuntimeNotPinned || !strings.Contains(failed.Message, "was not pinned") ||
				!strings.Contains(failed.Message, "create it again with the label") {
				t.Errorf("Failed condition %s: %q, want %s saying why and what to do", failed.Reason, failed.Message, v1alpha1.ReasonRuntimeNotPinned)
			}
			if len(rec.Events) != 1 {
				t.Errorf("%d events, want 1", len(rec.Events))
			}
		})
	}
}

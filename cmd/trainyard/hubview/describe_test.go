package hubview

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

func TestEventInfo(t *testing.T) {
	cases := map[string]struct {
		ev   corev1.Event
		want EventInfo
	}{
		"core event": {
			ev: corev1.Event{Type: "Normal", Reason: "Dispatched", Message: "m", Count: 3, LastTimestamp: ago(time.Minute),
				Source: corev1.EventSource{Component: "trainyard-hub"}},
			want: EventInfo{Object: "o", Type: "Normal", Reason: "Dispatched", From: "trainyard-hub", Count: 3, Last: ago(time.Minute), Message: "m"},
		},
		"events.k8s.io event with a series": {
			ev: corev1.Event{Type: "Warning", Reason: "Requeued", Message: "m", EventTime: metav1.NewMicroTime(now.Add(-time.Hour)),
				ReportingController: "kueue", Series: &corev1.EventSeries{Count: 4, LastObservedTime: metav1.NewMicroTime(now.Add(-time.Minute))}},
			want: EventInfo{Object: "o", Type: "Warning", Reason: "Requeued", From: "kueue", Count: 4, Last: ago(time.Minute), Message: "m"},
		},
		"no time but creation": {
			ev:   corev1.Event{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: ago(time.Hour)}, Type: "Normal", Reason: "R"},
			want: EventInfo{Object: "o", Type: "Normal", Reason: "R", Last: ago(time.Hour)},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, eventInfo("o", &tc.ev)); diff != "" {
				t.Errorf("eventInfo (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSummaryWithStart: a tenant's describe reads a job's start from the
// TrainJob's Running condition, since the hub's summary is not written
// again for a start; a summary that says more than Submitted stands.
func TestSummaryWithStart(t *testing.T) {
	started := metav1.NewTime(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	remoteStart := metav1.NewTime(started.Add(-time.Second))
	running := metav1.Condition{Type: v1alpha1.TrainJobRunning, Status: metav1.ConditionTrue, LastTransitionTime: started}
	stopped := metav1.Condition{Type: v1alpha1.TrainJobRunning, Status: metav1.ConditionFalse, LastTransitionTime: started}
	cases := map[string]struct {
		sum       *v1alpha1.PlacementSummary
		cond      *metav1.Condition
		wantPhase v1alpha1.DispatchPhase
		wantStart *metav1.Time
	}{
		"no summary":               {cond: &running},
		"submitted, not running":   {sum: &v1alpha1.PlacementSummary{Phase: v1alpha1.DispatchSubmitted}, wantPhase: v1alpha1.DispatchSubmitted},
		"submitted, running":       {sum: &v1alpha1.PlacementSummary{Phase: v1alpha1.DispatchSubmitted}, cond: &running, wantPhase: v1alpha1.DispatchRunning, wantStart: &started},
		"pending, running":         {sum: &v1alpha1.PlacementSummary{Phase: v1alpha1.DispatchPending}, cond: &running, wantPhase: v1alpha1.DispatchRunning, wantStart: &started},
		"submitted, run stopped":   {sum: &v1alpha1.PlacementSummary{Phase: v1alpha1.DispatchSubmitted}, cond: &stopped, wantPhase: v1alpha1.DispatchSubmitted},
		"succeeded, its own start": {sum: &v1alpha1.PlacementSummary{Phase: v1alpha1.DispatchSucceeded, Started: &remoteStart}, cond: &running, wantPhase: v1alpha1.DispatchSucceeded, wantStart: &remoteStart},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tj := &trainer.TrainJob{}
			if tc.cond != nil {
				tj.Status.Conditions = []metav1.Condition{*tc.cond}
			}
			got := withStart(tc.sum, tj)
			if tc.sum == nil {
				if got != nil {
					t.Fatalf("got %+v for no summary", got)
				}
				return
			}
			if got.Phase != tc.wantPhase || !got.Started.Equal(tc.wantStart) {
				t.Errorf("phase %q, started %v; want %q, %v", got.Phase, got.Started, tc.wantPhase, tc.wantStart)
			}
		})
	}
}

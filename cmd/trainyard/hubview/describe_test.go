package hubview

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

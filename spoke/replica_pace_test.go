package spoke

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// TestReplicaCountsArePaced: a change of replica counts alone waits until
// ReplicaPace after the Dispatch's last write; a phase change, a grown
// failure count, or a Dispatch not written yet by this agent goes at once.
func TestReplicaCountsArePaced(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	key := types.NamespacedName{Namespace: "agents", Name: "d"}
	counts := func(active, ready, succeeded, failed int32) []v1alpha1.ReplicaStatus {
		return []v1alpha1.ReplicaStatus{{Name: "node", Active: active, Ready: ready, Succeeded: succeeded, Failed: failed}}
	}
	running := v1alpha1.DispatchStatus{Phase: v1alpha1.DispatchRunning, Replicas: counts(1, 1, 0, 0), ObservedAttempt: 1}
	submitted := v1alpha1.DispatchStatus{Phase: v1alpha1.DispatchSubmitted, ObservedAttempt: 1}
	cases := map[string]struct {
		old       *v1alpha1.DispatchStatus // running if nil
		written   bool
		ago       time.Duration
		next      v1alpha1.DispatchStatus
		wantWait  time.Duration
		wantCount []v1alpha1.ReplicaStatus
	}{
		"counts alone, written 10 s ago: held": {written: true, ago: 10 * time.Second,
			next: v1alpha1.DispatchStatus{Phase: v1alpha1.DispatchRunning, Replicas: counts(0, 0, 1, 0)}, wantWait: 20 * time.Second, wantCount: counts(1, 1, 0, 0)},
		"counts alone, written a pace ago: written": {written: true, ago: ReplicaPace,
			next: v1alpha1.DispatchStatus{Phase: v1alpha1.DispatchRunning, Replicas: counts(0, 0, 1, 0)}, wantCount: counts(0, 0, 1, 0)},
		"counts alone, never written by this agent: written": {
			next: v1alpha1.DispatchStatus{Phase: v1alpha1.DispatchRunning, Replicas: counts(0, 0, 1, 0)}, wantCount: counts(0, 0, 1, 0)},
		"a failure: written": {written: true, ago: time.Second,
			next: v1alpha1.DispatchStatus{Phase: v1alpha1.DispatchRunning, Replicas: counts(1, 0, 0, 1)}, wantCount: counts(1, 0, 0, 1)},
		"with a phase change: written": {written: true, ago: time.Second,
			next: v1alpha1.DispatchStatus{Phase: v1alpha1.DispatchSucceeded, Replicas: counts(0, 0, 1, 0)}, wantCount: counts(0, 0, 1, 0)},
		"nothing changed: nothing held": {written: true, ago: time.Second, next: running, wantCount: counts(1, 1, 0, 0)},
		"first counts all zero: nothing to write, now or later": {old: &submitted, written: true, ago: time.Second,
			next: v1alpha1.DispatchStatus{Phase: v1alpha1.DispatchSubmitted, Replicas: counts(0, 0, 0, 0)}},
		"first counts with a pod active: held": {old: &submitted, written: true, ago: time.Second,
			next: v1alpha1.DispatchStatus{Phase: v1alpha1.DispatchSubmitted, Replicas: counts(1, 0, 0, 0)}, wantWait: ReplicaPace - time.Second},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var p replicaPacer
			if tc.written {
				p.wrote(key, t0.Add(-tc.ago))
			}
			old := &running
			if tc.old != nil {
				old = tc.old
			}
			next := tc.next.DeepCopy()
			if got := p.hold(key, old, next, t0); got != tc.wantWait {
				t.Errorf("hold = %s, want %s", got, tc.wantWait)
			}
			if diff := cmp.Diff(tc.wantCount, next.Replicas); diff != "" {
				t.Errorf("replicas to write (-want +got):\n%s", diff)
			}
		})
	}
}

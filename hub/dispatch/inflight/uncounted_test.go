package inflight

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/placement"
)

func TestInFlightOn(t *testing.T) {
	start := metav1.NewTime(t0)
	d := func(phase v1alpha1.DispatchPhase, startTime *metav1.Time) *v1alpha1.Dispatch {
		return &v1alpha1.Dispatch{Status: v1alpha1.DispatchStatus{Phase: phase, StartTime: startTime}}
	}
	counted := func(from int64) *v1alpha1.Dispatch {
		r := d(v1alpha1.DispatchRunning, &start)
		r.Status.CountedFromReading = from
		return r
	}
	deleted := d(v1alpha1.DispatchSubmitted, nil)
	deleted.DeletionTimestamp = &start
	beat := func(at time.Time) *metav1.Time { return &metav1.Time{Time: at} }
	cases := map[string]struct {
		d      *v1alpha1.Dispatch
		target v1alpha1.TargetStatus
		want   bool
	}{
		"not yet seen by its agent":       {d: d("", nil), want: true},
		"pending":                         {d: d(v1alpha1.DispatchPending, nil), want: true},
		"submitted, pods maybe unbound":   {d: d(v1alpha1.DispatchSubmitted, nil), target: v1alpha1.TargetStatus{LastHeartbeatTime: beat(t0.Add(time.Hour))}, want: true},
		"running without a start time":    {d: d(v1alpha1.DispatchRunning, nil), target: v1alpha1.TargetStatus{LastHeartbeatTime: beat(t0.Add(time.Hour))}, want: true},
		"running, heartbeat before start": {d: d(v1alpha1.DispatchRunning, &start), target: v1alpha1.TargetStatus{LastHeartbeatTime: beat(t0.Add(-time.Second))}, want: true},
		"running, heartbeat at the start": {d: d(v1alpha1.DispatchRunning, &start), target: v1alpha1.TargetStatus{LastHeartbeatTime: beat(t0)}, want: true},
		"running, no heartbeat at all":    {d: d(v1alpha1.DispatchRunning, &start), want: true},
		"running, heartbeat after start":  {d: d(v1alpha1.DispatchRunning, &start), target: v1alpha1.TargetStatus{LastHeartbeatTime: beat(t0.Add(time.Second))}},
		// Numbered readings decide, whatever the clocks say.
		"counted from a later reading, heartbeat after start": {d: counted(8),
			target: v1alpha1.TargetStatus{CapacityReading: 7, LastHeartbeatTime: beat(t0.Add(time.Hour))}, want: true},
		"counted from this reading, heartbeat at the start": {d: counted(7),
			target: v1alpha1.TargetStatus{CapacityReading: 7, LastHeartbeatTime: beat(t0)}},
		"counted from an earlier reading, heartbeat before start": {d: counted(3),
			target: v1alpha1.TargetStatus{CapacityReading: 7, LastHeartbeatTime: beat(t0.Add(-time.Hour))}},
		"counted, target publishes no readings (older agent)": {d: counted(3),
			target: v1alpha1.TargetStatus{LastHeartbeatTime: beat(t0.Add(time.Hour))}, want: true},
		"succeeded":     {d: d(v1alpha1.DispatchSucceeded, &start)},
		"failed":        {d: d(v1alpha1.DispatchFailed, nil)},
		"rejected":      {d: d(v1alpha1.DispatchRejected, nil)},
		"being deleted": {d: deleted},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := inFlightOn(tc.d, &tc.target); got != tc.want {
				t.Errorf("inFlightOn = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestReservationsOf(t *testing.T) {
	host := "kubernetes.io/hostname"
	pinned := func(name string, count int32, perPod int64, nodes ...string) v1alpha1.PodSetPlacement {
		ps := v1alpha1.PodSetPlacement{Name: name, Count: count, GPUsPerPod: perPod,
			Topology: &v1alpha1.TopologyAssignment{Levels: []string{"rack", host}}}
		for _, n := range nodes {
			ps.Topology.Domains = append(ps.Topology.Domains, v1alpha1.TopologyDomainAssignment{Values: []string{"r1", n}, Count: 1})
		}
		return ps
	}
	cases := map[string]struct {
		podSets []v1alpha1.PodSetPlacement
		total   int64
		want    []placement.Reservation
	}{
		"one pod set, GPUs per pod recorded": {
			podSets: []v1alpha1.PodSetPlacement{pinned("node", 2, 4, "n1", "n2")}, total: 8,
			want: []placement.Reservation{{Node: "n1", GPUs: 4}, {Node: "n2", GPUs: 4}},
		},
		"one pod set written before GPUs per pod": {
			podSets: []v1alpha1.PodSetPlacement{pinned("node", 2, 0, "n1", "n2")}, total: 8,
			want: []placement.Reservation{{Node: "n1", GPUs: 4}, {Node: "n2", GPUs: 4}},
		},
		"several pinned pod sets are each booked": {
			podSets: []v1alpha1.PodSetPlacement{pinned("launcher", 1, 1, "n1"), pinned("node", 2, 4, "n1", "n2")}, total: 9,
			want: []placement.Reservation{{Node: "n1", GPUs: 5}, {Node: "n2", GPUs: 4}},
		},
		"an unpinned pod set stays unattributed": {
			podSets: []v1alpha1.PodSetPlacement{{Name: "launcher", Count: 1, GPUsPerPod: 1}, pinned("node", 2, 4, "n1", "n2")}, total: 9,
			want: []placement.Reservation{{Node: "n1", GPUs: 4}, {Node: "n2", GPUs: 4}},
		},
		"several pod sets written before GPUs per pod": {
			podSets: []v1alpha1.PodSetPlacement{pinned("launcher", 1, 0, "n1"), pinned("node", 2, 0, "n1", "n2")}, total: 9,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := &v1alpha1.Dispatch{Spec: v1alpha1.DispatchSpec{PodSets: tc.podSets}}
			if diff := cmp.Diff(tc.want, reservationsOf(d, tc.total, host)); diff != "" {
				t.Errorf("reservations (-want +got):\n%s", diff)
			}
		})
	}
}

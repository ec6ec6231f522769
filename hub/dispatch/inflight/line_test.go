package inflight

import (
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// joinLine records key as waiting, as a failed decision does.
func joinLine(f *Record, key types.NamespacedName, w waiter) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.waitLocked(key, w)
}

// waitingFor is a waiter needing gpus under flavors, first in line at t0.
func waitingFor(gpus int64, flavors ...string) waiter {
	return waiter{gpus: gpus, flavors: flavors, since: t0}
}

// TestWakeUpsAreSizedToTheRoom: room on a target wakes, in priority and
// then arrival order, the waiting Workloads it can take by GPUs (less what
// is in flight there) and its free queue places, always the first in
// line, and never a Workload of another flavor or one the target could
// never run.
func TestWakeUpsAreSizedToTheRoom(t *testing.T) {
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	line := map[string]waiter{
		"first":      {gpus: 4, flavors: []string{"h100"}, since: at(0)},
		"second":     {gpus: 2, flavors: []string{"h100"}, since: at(time.Second)},
		"third":      {gpus: 2, flavors: []string{"h100"}, since: at(2 * time.Second)},
		"urgent":     {gpus: 8, flavors: []string{"h100"}, since: at(time.Hour), priority: 100},
		"other":      {gpus: 1, flavors: []string{"a100"}, since: at(0)},
		"never-here": {gpus: 1, flavors: []string{"h100"}, since: at(0), ineligible: map[string]int64{"gpu-a": 0}},
	}
	cases := map[string]struct {
		target   *v1alpha1.Target
		inFlight int64
		waiting  []string // default: the whole line
		want     []string
	}{
		"no room: only the first in line": {
			target: spokeTarget("gpu-a", "h100").Available().Obj(),
			want:   []string{"urgent"},
		},
		"room for the first in line by priority": {
			target: spokeTarget("gpu-a", "h100").Available().FreeGPUs(8).Obj(),
			want:   []string{"urgent"},
		},
		"room for more: the line in order as far as it fits": {
			target: spokeTarget("gpu-a", "h100").Available().FreeGPUs(14).Obj(),
			want:   []string{"urgent", "first", "second"},
		},
		"a job too large for what is left is passed over, not the ones behind it": {
			target:  spokeTarget("gpu-a", "h100").Available().FreeGPUs(5).Obj(),
			waiting: []string{"first", "second", "third"},
			want:    []string{"first"},
		},
		"what is in flight is not room": {
			target:   spokeTarget("gpu-a", "h100").Available().FreeGPUs(16).Obj(),
			inFlight: 10,
			waiting:  []string{"first", "second", "third"},
			want:     []string{"first", "second"},
		},
		"free queue places wake jobs beyond the GPUs": {
			target:  tytesting.MakeSlurmTarget("gpu-a", "h100", "gpu").Available().FreeGPUs(2).SlurmQueueDepth(1).Obj(),
			waiting: []string{"first", "second", "third"},
			want:    []string{"first", "second"},
		},
		"a target it could never run on does not wake it": {
			target:  spokeTarget("gpu-a", "h100").Available().FreeGPUs(1).Obj(),
			waiting: []string{"never-here", "second"},
			want:    []string{"second"},
		},
		"a target of another flavor wakes only its own": {
			target: spokeTarget("gpu-b", "a100").Available().FreeGPUs(8).Obj(),
			want:   []string{"other"},
		},
		"a target judged ineligible at another spec asks again": {
			target: func() *v1alpha1.Target {
				t := spokeTarget("gpu-a", "h100").Available().FreeGPUs(1).Obj()
				t.Generation = 1
				return t
			}(),
			waiting: []string{"never-here"},
			want:    []string{"never-here"},
		},
		"a target another job could never use still wakes it elsewhere": {
			target:  spokeTarget("gpu-b", "h100").Available().FreeGPUs(1).Obj(),
			waiting: []string{"never-here"},
			want:    []string{"never-here"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := New(time.Now)
			f.now = func() time.Time { return t0 }
			waiting := tc.waiting
			if waiting == nil {
				for k := range line {
					waiting = append(waiting, k)
				}
			}
			f.mu.Lock()
			for _, k := range waiting {
				f.waitLocked(types.NamespacedName{Namespace: "team-a", Name: k}, line[k])
			}
			if tc.inFlight > 0 {
				f.bookLocked("agents/busy", tc.target.Name, "busy", types.NamespacedName{Name: "busy"}, tc.inFlight, nil, false, t0)
			}
			f.mu.Unlock()
			got := names(f.NoteTarget(tc.target))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("woken (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWaitingKeepsItsPlace: a Workload that fails again keeps the place in
// line it first took, and the time it first found no room.
func TestWaitingKeepsItsPlace(t *testing.T) {
	f := New(time.Now)
	f.now = func() time.Time { return t0 }
	early := types.NamespacedName{Namespace: "team-a", Name: "early"}
	late := types.NamespacedName{Namespace: "team-a", Name: "late"}
	f.mu.Lock()
	f.waitLocked(early, waiter{gpus: 8, flavors: []string{"h100"}, since: t0})
	f.waitLocked(late, waiter{gpus: 8, flavors: []string{"h100"}, since: t0.Add(time.Minute)})
	f.now = func() time.Time { return t0.Add(time.Hour) }
	f.waitLocked(early, waiter{gpus: 8, flavors: []string{"h100"}, since: t0.Add(time.Hour)})
	f.mu.Unlock()
	if got := f.waiting[early].waitedFrom; !got.Equal(t0) {
		t.Errorf("waited from %v, want the first failure %v", got, t0)
	}
	got := names(f.NoteTarget(spokeTarget("gpu-a", "h100").Available().FreeGPUs(8).Obj()))
	if diff := cmp.Diff([]string{"early"}, got); diff != "" {
		t.Errorf("woken (-want +got):\n%s", diff)
	}
}

// TestSweepOffersEveryTargetsRoom: the periodic sweep wakes whom each
// known target's room can take, and no one for a target it forgot; a
// deleted target wakes all who waited for it.
func TestSweepOffersEveryTargetsRoom(t *testing.T) {
	f := New(time.Now)
	f.mu.Lock()
	for i, flavor := range []string{"h100", "a100", "gone"} {
		f.waitLocked(types.NamespacedName{Namespace: "team-a", Name: flavor}, waiter{gpus: 1, flavors: []string{flavor}, since: t0.Add(time.Duration(i))})
	}
	f.mu.Unlock()
	f.RecordTarget(spokeTarget("gpu-a", "h100").Available().FreeGPUs(1).Obj())
	f.RecordTarget(spokeTarget("gpu-b", "a100").Available().FreeGPUs(1).Obj())
	gone := spokeTarget("gpu-c", "gone").Available().FreeGPUs(1).Obj()
	f.RecordTarget(gone)
	if got := names(f.ForgetTarget(gone)); !cmp.Equal([]string{"gone"}, got) {
		t.Errorf("a deleted target woke %v, want those waiting for it", got)
	}
	joinLine(f, types.NamespacedName{Namespace: "team-a", Name: "gone"}, waiter{gpus: 1, flavors: []string{"gone"}, since: t0})
	got := names(f.Sweep())
	sort.Strings(got)
	if diff := cmp.Diff([]string{"a100", "h100"}, got); diff != "" {
		t.Errorf("woken (-want +got):\n%s", diff)
	}
}

func names(reqs []reconcile.Request) []string {
	out := []string{}
	for _, r := range reqs {
		out = append(out, r.Name)
	}
	return out
}

// TestTheLineStaysInOrder: the line a wake-up reads holds every waiting
// Workload once, in priority then arrival order, as they join, fail again
// (keeping their first place), change priority, book and leave.
func TestTheLineStaysInOrder(t *testing.T) {
	f := New(time.Now)
	key := func(i int) types.NamespacedName {
		return types.NamespacedName{Namespace: "team-a", Name: fmt.Sprint("wl-", i)}
	}
	f.mu.Lock()
	for i := range 50 {
		f.waitLocked(key(i), waiter{gpus: 1, priority: int32(i % 3), since: t0.Add(time.Duration(50-i) * time.Second)})
	}
	for i := 0; i < 50; i += 7 {
		f.waitLocked(key(i), waiter{gpus: 1, priority: int32(i % 3), since: t0.Add(time.Hour)}) // fails again
	}
	f.waitLocked(key(3), waiter{gpus: 1, priority: 9, since: t0}) // its priority rose
	for i := 0; i < 50; i += 5 {
		f.bookLocked(Key("agents", key(i).Name), "gpu-a", "uid", key(i), 1, nil, false, t0)
	}
	f.mu.Unlock()
	f.StopWaiting(key(1))

	var want []Place
	for k, w := range f.waiting {
		want = append(want, w.placeOf(k))
	}
	slices.SortFunc(want, Place.compare)
	if diff := cmp.Diff(want, f.line, cmp.AllowUnexported(Place{})); diff != "" {
		t.Errorf("line (-want +got):\n%s", diff)
	}
	if len(f.line) != 50-10-1 {
		t.Errorf("%d in line, want 39", len(f.line))
	}
	if f.line[0].Key != key(3) {
		t.Errorf("head of line %v, want the one whose priority rose", f.line[0].Key)
	}
}

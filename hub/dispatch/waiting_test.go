package dispatch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueuetesting "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/placement"
	tyt "github.com/trainyard-dev/trainyard/internal/testing"
)

// joinLine records key as waiting, as a failed decision does.
func joinLine(f *inflight, key types.NamespacedName, w waiter) {
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
			target:  tyt.MakeSlurmTarget("gpu-a", "h100", "gpu").Available().FreeGPUs(2).SlurmQueueDepth(1).Obj(),
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
			f := newInflight()
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
			got := names(f.noteTarget(tc.target))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("woken (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWaitingKeepsItsPlace: a Workload that fails again keeps the place in
// line it first took, and the time it first found no room.
func TestWaitingKeepsItsPlace(t *testing.T) {
	f := newInflight()
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
	got := names(f.noteTarget(spokeTarget("gpu-a", "h100").Available().FreeGPUs(8).Obj()))
	if diff := cmp.Diff([]string{"early"}, got); diff != "" {
		t.Errorf("woken (-want +got):\n%s", diff)
	}
}

// TestSweepOffersEveryTargetsRoom: the periodic sweep wakes whom each
// known target's room can take, and no one for a target it forgot; a
// deleted target wakes all who waited for it.
func TestSweepOffersEveryTargetsRoom(t *testing.T) {
	f := newInflight()
	f.mu.Lock()
	for i, flavor := range []string{"h100", "a100", "gone"} {
		f.waitLocked(types.NamespacedName{Namespace: "team-a", Name: flavor}, waiter{gpus: 1, flavors: []string{flavor}, since: t0.Add(time.Duration(i))})
	}
	f.mu.Unlock()
	f.recordTarget(spokeTarget("gpu-a", "h100").Available().FreeGPUs(1).Obj())
	f.recordTarget(spokeTarget("gpu-b", "a100").Available().FreeGPUs(1).Obj())
	gone := spokeTarget("gpu-c", "gone").Available().FreeGPUs(1).Obj()
	f.recordTarget(gone)
	if got := names(f.forgetTarget(gone)); !cmp.Equal([]string{"gone"}, got) {
		t.Errorf("a deleted target woke %v, want those waiting for it", got)
	}
	joinLine(f, types.NamespacedName{Namespace: "team-a", Name: "gone"}, waiter{gpus: 1, flavors: []string{"gone"}, since: t0})
	got := names(f.sweep())
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

// TestNoRoomKeepsTheCheckPending: a job that only waits for room keeps its
// quota: the check stays Pending with the reasons of its first try, written
// once with one event; a job no target serves yet, or that only targets of
// other flavors could run, goes back to Kueue (Retry), which may admit it
// with another flavor.
func TestNoRoomKeepsTheCheckPending(t *testing.T) {
	full := fmt.Errorf("%w for flavor h100: gpu-a: 0 GPUs free, job needs 8", placement.ErrNoCapacity)
	fuller := fmt.Errorf("%w for flavor h100: gpu-a: 0 GPUs free, job needs 8; gpu-b: paused", placement.ErrNoCapacity)
	_, otherFlavors := placement.Choose(placement.Request{Flavors: []string{"h100"}, QueueFlavors: []string{"h100", "a100"},
		PodSets: []placement.PodSet{{Name: "node", Count: 1, GPUsPerPod: 1}}}, []placement.Candidate{
		{Target: spokeTarget("gpu-a", "h100").Available().FreeGPUs(8).Obj(), Ineligible: "no command"},
		{Target: spokeTarget("gpu-b", "a100").Available().FreeGPUs(8).Obj()},
	})
	noTarget := fmt.Errorf("%w h100", placement.ErrNoTarget)
	cases := map[string]struct {
		errs      []error
		wantState kueue.CheckState
		wantMsg   string
		events    int
	}{
		"full: Pending, written once": {
			errs: []error{full, fuller}, wantState: kueue.CheckStatePending, wantMsg: WaitingPrefix + full.Error(), events: 1,
		},
		"no target serves the flavor: Retry": {
			errs: []error{noTarget}, wantState: kueue.CheckStateRetry, wantMsg: noTarget.Error(), events: 1,
		},
		"only other flavors could: Retry": {
			errs: []error{otherFlavors}, wantState: kueue.CheckStateRetry, wantMsg: otherFlavors.Error(), events: 1,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c, _ := statusClient(t, hubState{check: kueue.CheckStatePending}.objects()...)
			rec := record.NewFakeRecorder(10)
			r := NewReconciler(c, c, rec, clocktesting.NewFakeClock(t0), Options{})
			key := client.ObjectKey{Namespace: "team-a", Name: "wl"}
			for _, err := range tc.errs {
				joinLine(r.flight, key, waitingFor(8, "h100")) // as chooseAndBook records it
				s, lerr := r.load(ctx, key)
				if lerr != nil {
					t.Fatal(lerr)
				}
				if _, nerr := r.noPlacement(ctx, s, err); nerr != nil {
					t.Fatal(nerr)
				}
			}
			var wl kueue.Workload
			if err := c.Get(ctx, key, &wl); err != nil {
				t.Fatal(err)
			}
			var st kueue.CheckState
			var msg string
			for _, cs := range wl.Status.AdmissionChecks {
				if cs.Name == "trainyard" {
					st, msg = cs.State, cs.Message
				}
			}
			if st != tc.wantState || msg != tc.wantMsg {
				t.Errorf("check %s %q, want %s %q", st, msg, tc.wantState, tc.wantMsg)
			}
			if got := len(rec.Events); got != tc.events {
				t.Errorf("%d events, want %d", got, tc.events)
			}
			if got, want := r.flight.asleep(key), tc.wantState == kueue.CheckStatePending; got != want {
				t.Errorf("in the waiting line: %v, want %v (Kueue requeues a Retry)", got, want)
			}
		})
	}
}

// TestWaitingPassesWaitForAWakeUp: once a Workload waits for room and says
// so on its check, its passes do not try again until a wake-up offers it
// room; a check Kueue reset, or a checkless job, tries at once.
func TestWaitingPassesWaitForAWakeUp(t *testing.T) {
	key := types.NamespacedName{Namespace: "team-a", Name: "wl"}
	checkSays := func(msg string) *state {
		wl := reserved().Obj()
		wl.Status.AdmissionChecks = []kueue.AdmissionCheckState{{Name: "trainyard", State: kueue.CheckStatePending, Message: msg}}
		return &state{wl: wl, check: "trainyard", checkState: kueue.CheckStatePending}
	}
	r := NewReconciler(nil, nil, nil, clocktesting.NewFakeClock(t0), Options{})
	waiting := checkSays(WaitingPrefix + "no target has room")
	if r.stillWaiting(waiting) {
		t.Errorf("a Workload not in the line waits")
	}
	joinLine(r.flight, key, waitingFor(1, "h100"))
	if !r.stillWaiting(waiting) {
		t.Errorf("a Workload in the line that says it waits tries again")
	}
	if r.stillWaiting(checkSays("Reset to Pending after eviction")) {
		t.Errorf("a check Kueue reset waits")
	}
	checkless := checkSays(WaitingPrefix + "x")
	checkless.checkless = true
	if r.stillWaiting(checkless) {
		t.Errorf("a checkless job waits")
	}
	r.flight.noteTarget(spokeTarget("gpu-a", "h100").Available().FreeGPUs(1).Obj())
	if r.stillWaiting(waiting) {
		t.Errorf("a woken Workload waits")
	}
	joinLine(r.flight, key, waitingFor(1, "h100"))
	if !r.stillWaiting(waiting) {
		t.Errorf("a Workload that failed again after its wake-up tries again without a new one")
	}
}

// TestFreedRoomGoesToTheLine: room a wake-up offers the waiting is theirs
// until they try again: a job admitted meanwhile, or one behind them in
// line, waits instead of taking it first. A job ahead of them by priority
// takes it; a waiter that fails again, or never tries (promiseTTL), gives
// the offer back.
func TestFreedRoomGoesToTheLine(t *testing.T) {
	req := placement.Request{Flavors: []string{"h100"}, PodSets: []placement.PodSet{{Name: "node", Count: 1, GPUsPerPod: 4}}}
	early := types.NamespacedName{Namespace: "team-a", Name: "early"}
	cases := map[string]struct {
		priority  int32
		created   time.Time
		after     time.Duration // from the wake-up to the newcomer's decision
		failAgain bool          // the woken waiter failed again before it
		wantRoom  bool
	}{
		"a job admitted later waits behind the woken":  {created: t0.Add(time.Minute)},
		"an older job of the same priority goes first": {created: t0.Add(-time.Minute), wantRoom: true},
		"a job of higher priority goes first":          {priority: 10, created: t0.Add(time.Minute), wantRoom: true},
		"a waiter that failed again gave it back":      {created: t0.Add(time.Minute), failAgain: true, wantRoom: true},
		"an offer never taken lapses":                  {created: t0.Add(time.Minute), after: 2 * promiseTTL, wantRoom: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			target := spokeTarget("gpu-a", "h100").AgentNamespace("agents").Available().FreeGPUs(4).Obj()
			c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(target).Build()
			clk := clocktesting.NewFakeClock(t0)
			r := NewReconciler(c, c, nil, clk, Options{})
			r.flight.now = clk.Now
			joinLine(r.flight, early, waiter{gpus: 4, flavors: []string{"h100"}, since: t0})
			if got := names(r.flight.noteTarget(target)); !cmp.Equal([]string{"early"}, got) {
				t.Fatalf("woke %v, want the waiter", got)
			}
			if tc.failAgain {
				joinLine(r.flight, early, waiter{gpus: 4, flavors: []string{"h100"}, since: t0})
			}
			clk.Step(tc.after)
			newcomer := kueuetesting.MakeWorkload("newcomer", "team-a").UID("newcomer").Priority(tc.priority).Creation(tc.created).Obj()
			_, err := r.chooseAndBook(context.Background(), newcomer, req, nil, dispatchName(newcomer, 1))
			var noPlace placementError
			switch {
			case tc.wantRoom && err != nil:
				t.Fatalf("the newcomer found no room: %v", err)
			case !tc.wantRoom && !errors.As(err, &noPlace):
				t.Fatalf("the newcomer: %v, want it to wait", err)
			case tc.wantRoom:
				return
			}
			if _, err := r.chooseAndBook(context.Background(), reserved().Name("early").Obj(), req, nil, "early-1"); err != nil {
				t.Errorf("the woken waiter found no room: %v", err)
			}
		})
	}
}

// TestTheLineStaysInOrder: the line a wake-up reads holds every waiting
// Workload once, in priority then arrival order, as they join, fail again
// (keeping their first place), change priority, book and leave.
func TestTheLineStaysInOrder(t *testing.T) {
	f := newInflight()
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
		f.bookLocked(keyOf("agents", key(i).Name), "gpu-a", "uid", key(i), 1, nil, false, t0)
	}
	f.mu.Unlock()
	f.stopWaiting(key(1))

	var want []place
	for k, w := range f.waiting {
		want = append(want, w.placeOf(k))
	}
	slices.SortFunc(want, place.compare)
	if diff := cmp.Diff(want, f.line, cmp.AllowUnexported(place{})); diff != "" {
		t.Errorf("line (-want +got):\n%s", diff)
	}
	if len(f.line) != 50-10-1 {
		t.Errorf("%d in line, want 39", len(f.line))
	}
	if f.line[0].key != key(3) {
		t.Errorf("head of line %v, want the one whose priority rose", f.line[0].key)
	}
}

package dispatch

import (
	"context"
	"errors"
	"fmt"
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

	"github.com/trainyard-dev/trainyard/hub/dispatch/inflight"
	"github.com/trainyard-dev/trainyard/hub/placement"
)

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
				joinLine(r.flight, key, 8, "h100") // as chooseAndBook records it
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
			if got, want := r.flight.Asleep(key), tc.wantState == kueue.CheckStatePending; got != want {
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
	joinLine(r.flight, key, 1, "h100")
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
	r.flight.NoteTarget(spokeTarget("gpu-a", "h100").Available().FreeGPUs(1).Obj())
	if r.stillWaiting(waiting) {
		t.Errorf("a woken Workload waits")
	}
	joinLine(r.flight, key, 1, "h100")
	if !r.stillWaiting(waiting) {
		t.Errorf("a Workload that failed again after its wake-up tries again without a new one")
	}
}

// TestFreedRoomGoesToTheLine: room a wake-up offers the waiting is theirs
// until they try again: a job admitted meanwhile, or one behind them in
// line, waits instead of taking it first. A job ahead of them by priority
// takes it; a waiter that fails again, or never tries (an hour: past the
// record's promise TTL), gives the offer back.
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
		"an offer never taken lapses":                  {created: t0.Add(time.Minute), after: time.Hour, wantRoom: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			target := spokeTarget("gpu-a", "h100").AgentNamespace("agents").Available().FreeGPUs(4).Obj()
			c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(target).Build()
			clk := clocktesting.NewFakeClock(t0)
			r := NewReconciler(c, c, nil, clk, Options{})
			joinLine(r.flight, early, 4, "h100")
			if got := r.flight.NoteTarget(target); !cmp.Equal([]reconcile.Request{{NamespacedName: early}}, got) {
				t.Fatalf("woke %v, want the waiter", got)
			}
			if tc.failAgain {
				joinLine(r.flight, early, 4, "h100")
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

// joinLine records key as waiting for gpus of flavor, first in line at t0,
// as chooseAndBook records a Workload that found no room.
func joinLine(f *inflight.Record, key types.NamespacedName, gpus int64, flavor string) {
	_ = f.Decide(func(tx *inflight.Tx) error {
		tx.Wait(inflight.Place{Key: key, Since: t0}, inflight.Need{GPUs: gpus, Flavors: []string{flavor}})
		return nil
	})
}

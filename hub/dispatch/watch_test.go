package dispatch

import (
	"context"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tyt "github.com/trainyard-dev/trainyard/internal/testing"
)

func TestMayHaveMoreRoom(t *testing.T) {
	base := spokeTarget("gpu-a", "h100").Available().FreeGPUsPerNode(8, 0).MaxGPUsPerNode(8)
	heartbeat := base.Clone().Obj()
	heartbeat.Status.LastHeartbeatTime = &metav1.Time{Time: t0}
	cases := map[string]struct {
		updated *v1alpha1.Target
		want    bool
	}{
		"a heartbeat alone":  {updated: heartbeat},
		"fewer free GPUs":    {updated: base.Clone().FreeGPUsPerNode(0, 0).Obj(), want: true},
		"more free GPUs":     {updated: base.Clone().FreeGPUsPerNode(8, 8).Obj(), want: true},
		"free GPUs moved":    {updated: base.Clone().FreeGPUsPerNode(0, 8).Obj(), want: true},
		"spec changed":       {updated: func() *v1alpha1.Target { t := base.Clone().Obj(); t.Generation++; return t }(), want: true},
		"larger nodes known": {updated: base.Clone().MaxGPUsPerNode(16).Obj(), want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := mayHaveMoreRoom(base.Obj(), tc.updated); got != tc.want {
				t.Errorf("mayHaveMoreRoom = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestTargetChangesWakeOnlyWhomTheyAffect: a heartbeat wakes no one; more
// room wakes the waiting Workloads only; an availability flip also wakes
// the Workloads with unfinished Dispatches on the target, not those whose
// Dispatch there finished.
func TestTargetChangesWakeOnlyWhomTheyAffect(t *testing.T) {
	running := tyt.MakeDispatch("running", "agents", "gpu-a").Phase(v1alpha1.DispatchRunning).Obj()
	done := tyt.MakeDispatch("done", "agents", "gpu-a").Phase(v1alpha1.DispatchSucceeded).Obj()
	elsewhere := tyt.MakeDispatch("elsewhere", "agents", "gpu-b").Phase(v1alpha1.DispatchRunning).Obj()
	c := withDispatchIndexes(fake.NewClientBuilder().WithScheme(testScheme(t))).WithObjects(running, done, elsewhere).Build()
	r := NewReconciler(c, c, nil, clocktesting.NewFakeClock(t0), Options{})
	waiter := types.NamespacedName{Namespace: "team-a", Name: "waiter"}
	joinLine(r.flight, waiter, 1, "h100")

	base := spokeTarget("gpu-a", "h100").Available().FreeGPUs(8)
	beat := base.Clone().Obj()
	beat.Status.LastHeartbeatTime = &metav1.Time{Time: t0}
	onTarget := types.NamespacedName{Namespace: "team-a", Name: "wl-running"}
	cases := map[string]struct {
		updated *v1alpha1.Target
		want    []types.NamespacedName
	}{
		"a heartbeat":   {updated: beat},
		"GPUs freed":    {updated: base.Clone().FreeGPUs(16).Obj(), want: []types.NamespacedName{waiter}},
		"lease expired": {updated: base.Clone().AvailableCondition(metav1.ConditionFalse, v1alpha1.ReasonLeaseExpired).Obj(), want: []types.NamespacedName{waiter, onTarget}},
		"its flavor dropped": {updated: func() *v1alpha1.Target {
			t := base.Clone().Flavors("a100").Obj()
			t.Generation++
			return t
		}(), want: []types.NamespacedName{waiter}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			defer q.ShutDown()
			r.targetHandler().Update(context.Background(), event.UpdateEvent{ObjectOld: base.Obj(), ObjectNew: tc.updated}, q)
			got := []types.NamespacedName{}
			for q.Len() > 0 {
				req, _ := q.Get()
				got = append(got, req.NamespacedName)
				q.Done(req)
			}
			sort.Slice(got, func(i, j int) bool { return got[i].Name < got[j].Name })
			if diff := cmp.Diff(append([]types.NamespacedName{}, tc.want...), got); diff != "" {
				t.Errorf("woken (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWorkloadsOnTargetComparesFullNames: two Targets whose long names
// share a label value each wake only the Workloads of their own Dispatches.
func TestWorkloadsOnTargetComparesFullNames(t *testing.T) {
	a, b := target253, target253[:252]+"y"
	mk := func(name, target, wl string) *v1alpha1.Dispatch {
		d := &v1alpha1.Dispatch{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "agents",
			Labels: map[string]string{v1alpha1.LabelTarget: v1alpha1.LabelValue(target)}}}
		d.Spec.TargetName, d.Spec.Workload = target, v1alpha1.WorkloadReference{Namespace: "team-a", Name: wl}
		return d
	}
	// Force a shared label value, as a hash collision would.
	da, db := mk("da", a, "wl-a"), mk("db", b, "wl-b")
	db.Labels[v1alpha1.LabelTarget] = da.Labels[v1alpha1.LabelTarget]
	r := &Reconciler{client: withDispatchIndexes(fake.NewClientBuilder().WithScheme(testScheme(t))).WithObjects(da, db).Build()}
	got := r.workloadsOnTarget(context.Background(), a)
	want := []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "wl-a"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("workloadsOnTarget (-want +got):\n%s", diff)
	}
}

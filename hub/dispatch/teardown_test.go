package dispatch

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueuetesting "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

func TestMustTearDown(t *testing.T) {
	const check = kueue.AdmissionCheckReference("trainyard")
	cases := map[string]struct {
		wl         *kueue.Workload
		check      kueue.AdmissionCheckReference // defaults to check; "-" for none
		checkState kueue.CheckState
		live       *v1alpha1.Dispatch
		want       bool
	}{
		"holding quota, pending, dispatched": {
			wl: reserved().Obj(), checkState: kueue.CheckStatePending, live: liveDispatch(v1alpha1.DispatchPending),
		},
		"holding quota, ready, running": {
			wl: reserved().Obj(), checkState: kueue.CheckStateReady, live: liveDispatch(v1alpha1.DispatchRunning),
		},
		"holding quota before any attempt": {
			wl: reserved().Obj(), checkState: kueue.CheckStatePending,
		},
		"deleted": {
			wl: reserved().Finalizers(v1alpha1.WorkloadFinalizer).DeletionTimestamp(t0).Obj(), checkState: kueue.CheckStateReady,
			live: liveDispatch(v1alpha1.DispatchRunning), want: true,
		},
		"deleted after finishing": {
			wl:   reserved().FinishedAt(t0).Finalizers(v1alpha1.WorkloadFinalizer).DeletionTimestamp(t0).Obj(),
			live: liveDispatch(v1alpha1.DispatchSucceeded), checkState: kueue.CheckStateReady, want: true,
		},
		"the check is no longer on the Workload": {
			wl: reserved().Obj(), check: "-", live: liveDispatch(v1alpha1.DispatchRunning), want: true,
		},
		"finished with its Dispatch final": {
			wl: reserved().FinishedAt(t0).Obj(), checkState: kueue.CheckStateReady, live: liveDispatch(v1alpha1.DispatchSucceeded),
		},
		"finished with its Dispatch failed": {
			wl: reserved().FinishedAt(t0).Obj(), checkState: kueue.CheckStateReady, live: liveDispatch(v1alpha1.DispatchFailed),
		},
		"finished, quota released, Dispatch final": {
			wl: kueuetesting.MakeWorkload("wl", "team-a").FinishedAt(t0).Obj(), checkState: kueue.CheckStateReady,
			live: liveDispatch(v1alpha1.DispatchSucceeded),
		},
		"finished while its Dispatch still runs": {
			wl: reserved().FinishedAt(t0).Obj(), checkState: kueue.CheckStateReady, live: liveDispatch(v1alpha1.DispatchRunning), want: true,
		},
		"finished without a live Dispatch": {
			wl: reserved().FinishedAt(t0).Obj(), checkState: kueue.CheckStateReady, want: true,
		},
		"evicted": {
			wl: reserved().EvictedAt(t0).Obj(), checkState: kueue.CheckStateReady, live: liveDispatch(v1alpha1.DispatchRunning), want: true,
		},
		"quota never reserved": {
			wl: kueuetesting.MakeWorkload("wl", "team-a").Obj(), checkState: kueue.CheckStatePending, want: true,
		},
		"quota released": {
			wl:         reserved().Condition(metav1.Condition{Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionFalse, Reason: "Pending"}).Obj(),
			checkState: kueue.CheckStatePending, live: liveDispatch(v1alpha1.DispatchRunning), want: true,
		},
		"the check asks for a retry": {
			wl: reserved().Obj(), checkState: kueue.CheckStateRetry, live: liveDispatch(v1alpha1.DispatchRunning), want: true,
		},
		"the check rejected the Workload": {
			wl: reserved().Obj(), checkState: kueue.CheckStateRejected, live: liveDispatch(v1alpha1.DispatchRejected), want: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := &state{wl: tc.wl, check: check, checkState: tc.checkState, live: tc.live}
			switch tc.check {
			case "-":
				s.check = ""
			case "":
			default:
				s.check = tc.check
			}
			if got := (&Reconciler{}).mustTearDown(s); got != tc.want {
				t.Errorf("mustTearDown = %v, want %v", got, tc.want)
			}
		})
	}
}

package dispatch

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tyt "github.com/trainyard-dev/trainyard/internal/testing"
)

func TestIgnoreOwnAttemptWrites(t *testing.T) {
	base := func() *kueue.Workload { return reserved().Annotation(v1alpha1.AnnotationAttempt, "1").Obj() }
	cases := map[string]tyt.UpdateCase[*kueue.Workload]{
		"only the attempt":               {Change: func(wl *kueue.Workload) { wl.Annotations[v1alpha1.AnnotationAttempt] = "2"; wl.ResourceVersion = "9" }},
		"attempt and another annotation": {Change: func(wl *kueue.Workload) { wl.Annotations[v1alpha1.AnnotationAttempt] = "2"; wl.Annotations["x"] = "y" }, Pass: true},
		"attempt and a status change":    {Change: func(wl *kueue.Workload) { wl.Annotations[v1alpha1.AnnotationAttempt] = "2"; wl.Status.Conditions = nil }, Pass: true},
		"attempt and a finalizer": {Change: func(wl *kueue.Workload) {
			wl.Annotations[v1alpha1.AnnotationAttempt] = "2"
			wl.Finalizers = []string{"f"}
		}, Pass: true},
		"attempt and trainyard's finalizer": {Change: func(wl *kueue.Workload) {
			wl.Annotations[v1alpha1.AnnotationAttempt] = "2"
			wl.Finalizers = append(wl.Finalizers, v1alpha1.WorkloadFinalizer)
		}},
		"attempt, trainyard's finalizer and another": {Change: func(wl *kueue.Workload) {
			wl.Annotations[v1alpha1.AnnotationAttempt] = "2"
			wl.Finalizers = append(wl.Finalizers, v1alpha1.WorkloadFinalizer, "f")
		}, Pass: true},
		"trainyard's finalizer alone": {Change: func(wl *kueue.Workload) {
			wl.Finalizers = append(wl.Finalizers, v1alpha1.WorkloadFinalizer)
		}, Pass: true},
		"attempt and deletion": {Change: func(wl *kueue.Workload) {
			wl.Annotations[v1alpha1.AnnotationAttempt] = "2"
			wl.DeletionTimestamp = &metav1.Time{}
		}, Pass: true},
		"a status change alone":           {Change: func(wl *kueue.Workload) { wl.Status.Conditions = nil }, Pass: true},
		"nothing (a resync)":              {Change: func(wl *kueue.Workload) {}, Pass: true},
		"attempt and a spec (generation)": {Change: func(wl *kueue.Workload) { wl.Annotations[v1alpha1.AnnotationAttempt] = "2"; wl.Generation++ }, Pass: true},
	}
	tyt.ExpectUpdates(t, ignoreOwnAttemptWrites(), base, cases)
}

// TestIgnoreTheStartOfAWait: the write that starts a wait for room wakes
// no pass; any other change beside it, or a later change of a waiting
// Workload, does.
func TestIgnoreTheStartOfAWait(t *testing.T) {
	check := func(st kueue.CheckState, msg string) kueue.AdmissionCheckState {
		return kueue.AdmissionCheckState{Name: "trainyard", State: st, Message: msg, LastTransitionTime: metav1.NewTime(t0)}
	}
	waiting := check(kueue.CheckStatePending, WaitingPrefix+"no target has room")
	cases := map[string]struct {
		before, after kueue.AdmissionCheckState
		change        func(wl *kueue.Workload)
		wake          bool
	}{
		"starts to wait":                         {before: check(kueue.CheckStatePending, ""), after: waiting},
		"starts to wait after a Retry":           {before: check(kueue.CheckStateRetry, "x"), after: waiting},
		"was waiting, now dispatched":            {before: waiting, after: check(kueue.CheckStatePending, "dispatched to target a"), wake: true},
		"was waiting, Kueue changed a condition": {before: waiting, after: waiting, change: func(wl *kueue.Workload) { wl.Status.Conditions = nil }, wake: true},
		"starts to wait and is evicted": {before: check(kueue.CheckStatePending, ""), after: waiting, change: func(wl *kueue.Workload) {
			wl.Status.Conditions = nil
		}, wake: true},
		"starts to wait and is deleted": {before: check(kueue.CheckStatePending, ""), after: waiting, change: func(wl *kueue.Workload) {
			wl.DeletionTimestamp = &metav1.Time{}
		}, wake: true},
	}
	p := ignoreOwnAttemptWrites()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			old, cur := reserved().Obj(), reserved().Obj()
			old.Status.AdmissionChecks = []kueue.AdmissionCheckState{tc.before}
			cur.Status.AdmissionChecks = []kueue.AdmissionCheckState{tc.after}
			if tc.change != nil {
				tc.change(cur)
			}
			if got := p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: cur}); got != tc.wake {
				t.Errorf("wakes the controller: %v, want %v", got, tc.wake)
			}
		})
	}
}

// TestDrainerWakesOnDispatchesComingAndGoing: the drainer wakes when a
// Dispatch is created, deleted or starts to be deleted, not on its status
// writes.
func TestDrainerWakesOnDispatchesComingAndGoing(t *testing.T) {
	base := func() *v1alpha1.Dispatch { return liveOn(v1alpha1.DispatchPending, "", "", false).Obj() }
	cases := map[string]tyt.UpdateCase[*v1alpha1.Dispatch]{
		"a status write":         {Change: func(d *v1alpha1.Dispatch) { d.Status.Phase = v1alpha1.DispatchRunning; d.ResourceVersion = "9" }},
		"nothing (a resync)":     {Change: func(d *v1alpha1.Dispatch) {}},
		"starts to be deleted":   {Change: func(d *v1alpha1.Dispatch) { d.DeletionTimestamp = &metav1.Time{Time: t0} }, Pass: true},
		"a finalizer is dropped": {Change: func(d *v1alpha1.Dispatch) { d.Finalizers = nil }},
	}
	p := dispatchComesOrGoes()
	tyt.ExpectUpdates(t, p, base, cases)
	if !p.Create(event.CreateEvent{Object: base()}) || !p.Delete(event.DeleteEvent{Object: base()}) {
		t.Error("a Dispatch created or deleted does not wake the drainer")
	}
}

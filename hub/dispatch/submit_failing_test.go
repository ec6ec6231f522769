package dispatch

import (
	"context"
	"strings"
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// TestTargetThatKeepsFailingToCreate: an agent that gave up creating the
// job (reason SubmitFailing) is a refusal like a backend's: the job is
// placed again without that target, and with no target left it is
// rejected, its quota released, with the agent's words on the Workload and
// the TrainJob.
func TestTargetThatKeepsFailingToCreate(t *testing.T) {
	ctx := context.Background()
	const gaveUp = "the target kept failing to create the job (10 tries in a row over 5m0s); the last error: forbidden: missing RBAC"
	d := liveOn(v1alpha1.DispatchRejected, v1alpha1.ReasonSubmitFailing, gaveUp, false).Obj()
	objs := pinTrainJob(t, hubState{check: kueue.CheckStatePending, dispatch: d}.objects())
	c, _ := statusClient(t, objs...)
	rec := record.NewFakeRecorder(10)
	r := NewReconciler(c, c, rec, clocktesting.NewFakeClock(t0), Options{})
	key := client.ObjectKey{Namespace: "team-a", Name: "wl"}
	check := func() (kueue.CheckState, string) {
		var wl kueue.Workload
		if err := c.Get(ctx, key, &wl); err != nil {
			t.Fatal(err)
		}
		for _, s := range wl.Status.AdmissionChecks {
			if s.Name == "trainyard" {
				return s.State, s.Message
			}
		}
		return "", ""
	}

	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	if st, msg := check(); st != kueue.CheckStatePending || msg != "target gpu-a (attempt 1) refused the job: "+gaveUp+"; placing it again" {
		t.Errorf("after the agent gave up: check %s %q, want Pending and placed again", st, msg)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(d), &v1alpha1.Dispatch{}); err == nil {
		t.Errorf("the given-up Dispatch is still there")
	}

	// The next pass finds no other target.
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	st, msg := check()
	if st != kueue.CheckStateRejected || !strings.Contains(msg, "gpu-a: refused this job before: "+gaveUp) {
		t.Errorf("with no target left: check %s %q, want Rejected saying the target kept failing and why", st, msg)
	}
	var tj trainer.TrainJob
	if err := c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "train"}, &tj); err != nil {
		t.Fatal(err)
	}
	failed := apimeta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobFailed)
	if failed == nil || failed.Reason != v1alpha1.ReasonDispatchRejected || failed.Message != "trainyard: "+msg {
		t.Errorf("TrainJob Failed = %+v, want DispatchRejected with the check's message %q", failed, msg)
	}
}

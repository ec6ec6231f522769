package spoke

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// failingSince is d after n failed creates, the first at since, the last
// with message msg.
func failingSince(w *tytesting.DispatchWrapper, n int32, since time.Duration, msg string) *tytesting.DispatchWrapper {
	return withStatus(w, func(s *v1alpha1.DispatchStatus) {
		s.Message, s.SubmitFailures, s.ObservedAttempt = "submit failed, retrying: "+msg, n, 1
		s.Conditions = []metav1.Condition{{Type: v1alpha1.DispatchAccepted, Status: metav1.ConditionFalse,
			Reason: v1alpha1.ReasonSubmitFailing, Message: s.Message, LastTransitionTime: *at(since)}}
	})
}

// gaveUp is d rejected at at(now) after n failed creates over failing.
func gaveUp(w *tytesting.DispatchWrapper, n int32, failing, now time.Duration, msg string) *tytesting.DispatchWrapper {
	return withStatus(w, func(s *v1alpha1.DispatchStatus) {
		why := fmt.Sprintf("the target kept failing to create the job (%d tries in a row over %s); the last error: %s", n, failing, msg)
		*s = v1alpha1.DispatchStatus{Phase: v1alpha1.DispatchRejected, Reason: v1alpha1.ReasonSubmitFailing, Message: why,
			SubmitFailures: n, CompletionTime: at(now), ObservedAttempt: 1,
			Conditions: conds(v1alpha1.ReasonSubmitFailing, why, no, no, yes)}
	})
}

// TestSubmitFailuresAreBounded: a create that keeps failing with anything
// but a refusal is retried until it has failed MaxSubmitFailures times in a
// row over at least SubmitFailingFor; then the Dispatch is rejected with
// the last error, so the hub stops holding the job's quota for it. The
// count lives in the status: a restarted agent (each case's reconciler is
// new) goes on from it.
func TestSubmitFailuresAreBounded(t *testing.T) {
	const forbidden = `admission webhook "pods.example.com" denied the request: forbidden`
	failing := func(b *fakeBackend, _ *v1alpha1.Dispatch) { b.submitErr = errors.New(forbidden) }
	runReconcile(t, map[string]reconcileCase{
		"ten failures a minute apart: rejected at the tenth": {
			// The clock moves a minute after each pass.
			dispatch:   dispatch(),
			prepare:    failing,
			passes:     MaxSubmitFailures,
			want:       ours(gaveUp(dispatch(), MaxSubmitFailures, 9*time.Minute, 9*time.Minute, forbidden)),
			wantCalls:  fakeCalls{Submit: MaxSubmitFailures},
			wantWrites: MaxSubmitFailures,
		},
		"nine failures: retried": {
			dispatch:   dispatch(),
			prepare:    failing,
			passes:     MaxSubmitFailures - 1,
			wantErr:    true,
			want:       ours(failingSince(dispatch(), MaxSubmitFailures-1, 0, forbidden)),
			wantCalls:  fakeCalls{Submit: MaxSubmitFailures - 1},
			wantWrites: MaxSubmitFailures - 1,
			checkLTT:   true,
		},
		"many failures in less than the time: retried, dated at the first": {
			dispatch:   ours(failingSince(dispatch(), 30, -4*time.Minute, "slurmrestd: 500")),
			prepare:    failing,
			wantErr:    true,
			want:       ours(failingSince(dispatch(), 31, -4*time.Minute, forbidden)),
			wantCalls:  fakeCalls{Submit: 1},
			wantWrites: 1,
			checkLTT:   true,
		},
		"a restarted agent counts on from the status": {
			dispatch:   ours(failingSince(dispatch(), MaxSubmitFailures-1, -SubmitFailingFor, forbidden)),
			prepare:    failing,
			want:       ours(gaveUp(dispatch(), MaxSubmitFailures, SubmitFailingFor, 0, forbidden)),
			wantCalls:  fakeCalls{Submit: 1},
			wantWrites: 1,
		},
		"a create that succeeds at last starts the count afresh": {
			dispatch:   ours(failingSince(dispatch(), MaxSubmitFailures-1, -SubmitFailingFor, forbidden)),
			wantResult: ctrl.Result{RequeueAfter: resync},
			want:       ours(submitted(dispatch())),
			wantCalls:  fakeCalls{Submit: 1, Create: 1, Observe: 1},
			wantWrites: 1,
			wantRemote: remoteOf(dispatch()),
		},
	})
}

// TestSubmitFailureWhileTheAgentStops: a create cut short by the agent's
// own stop is not counted against the target.
func TestSubmitFailureWhileTheAgentStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	status := failingSince(dispatch(), MaxSubmitFailures-1, -SubmitFailingFor, "x").Obj().Status
	if err := submitFailed(ctx, &status, context.Canceled, metav1.NewTime(t0)); !errors.Is(err, context.Canceled) {
		t.Errorf("submitFailed = %v, want the error back to retry", err)
	}
	if status.SubmitFailures != MaxSubmitFailures-1 || status.Phase == v1alpha1.DispatchRejected {
		t.Errorf("after the agent's own stop: %d failures, phase %q; want %d, not rejected", status.SubmitFailures, status.Phase, MaxSubmitFailures-1)
	}
}

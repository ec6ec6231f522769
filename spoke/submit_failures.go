package spoke

import (
	"context"
	"fmt"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// Bounds of the retries of a create that keeps failing with anything but
// the backend's refusal (a spoke webhook answering Forbidden, missing
// RBAC, slurmrestd answering 500). Such a failure may pass, so the agent
// retries with back-off; one that does not would hold the job's quota on
// the hub forever. Once the creates have failed MaxSubmitFailures times in
// a row and for at least SubmitFailingFor, the agent rejects the Dispatch
// (reason SubmitFailing, with the last error), and the hub places the job
// elsewhere or rejects it. Both are counted in the Dispatch's status, so
// an agent that restarts keeps counting.
const (
	MaxSubmitFailures = 10
	SubmitFailingFor  = 5 * time.Minute
)

// submitFailed records in status a create that failed with err (not a
// refusal) at now. It returns err while the agent retries, and nil once it
// gives up and status says Rejected. The count is status.SubmitFailures;
// the first failure of the run is the Accepted condition's transition time.
func submitFailed(ctx context.Context, status *v1alpha1.DispatchStatus, err error, now metav1.Time) error {
	status.Message = "submit failed, retrying: " + err.Error()
	if ctx.Err() != nil {
		// The agent is stopping: that is not the target failing.
		return err
	}
	first := now
	if c := apimeta.FindStatusCondition(status.Conditions, v1alpha1.DispatchAccepted); c != nil &&
		status.SubmitFailures > 0 && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonSubmitFailing {
		first = c.LastTransitionTime
	}
	status.SubmitFailures++
	if failing := now.Sub(first.Time); status.SubmitFailures >= MaxSubmitFailures && failing >= SubmitFailingFor {
		setPhase(status, v1alpha1.DispatchRejected, v1alpha1.ReasonSubmitFailing,
			fmt.Sprintf("the target kept failing to create the job (%d tries in a row over %s); the last error: %v",
				status.SubmitFailures, failing.Round(time.Second), err), now)
		return nil
	}
	apimeta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: v1alpha1.DispatchAccepted,
		Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonSubmitFailing, Message: status.Message})
	apimeta.FindStatusCondition(status.Conditions, v1alpha1.DispatchAccepted).LastTransitionTime = first
	return err
}

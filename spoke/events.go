package spoke

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// Events the agent records on the hub Dispatches of its namespace, with its
// hub credentials, once the status write that says the same succeeded.
// EventSelfFenced (lease.go) is recorded on the Dispatch too, when the
// agent reports work it stopped for want of a lease.
const (
	// EventRemoteCreated: the agent created (or, on a retry, adopted) the
	// remote work.
	EventRemoteCreated = v1alpha1.ReasonRemoteCreated
	// EventRemoteRefused: the backend refused the job; the message says why.
	EventRemoteRefused = v1alpha1.ReasonRemoteRejected
	// EventRemoteCancelled: the Dispatch was deleted and the agent deleted
	// its remote work.
	EventRemoteCancelled = v1alpha1.ReasonRemoteCancelled
	// EventFenced: the fence deleted remote work of another attempt of the
	// Dispatch, or of a Dispatch that is gone.
	EventFenced = "Fenced"
)

// dispatchEvent is an Event to record on a Dispatch.
type dispatchEvent struct {
	typ, reason, message string
}

// events are what a pass that moves status from old to cur did.
func (r *DispatchReconciler) events(old, cur *v1alpha1.DispatchStatus) []dispatchEvent {
	var out []dispatchEvent
	if old.Remote == nil && cur.Remote != nil {
		out = append(out, dispatchEvent{corev1.EventTypeNormal, EventRemoteCreated, "created " + cur.Remote.String()})
	}
	if old.Phase != v1alpha1.DispatchRejected && cur.Phase == v1alpha1.DispatchRejected {
		out = append(out, dispatchEvent{corev1.EventTypeWarning, EventRemoteRefused, "the backend refused the job: " + cur.Message})
	}
	return out
}

func (r *DispatchReconciler) event(d *v1alpha1.Dispatch, e dispatchEvent) {
	if r.Recorder != nil {
		r.Recorder.Event(d, e.typ, e.reason, e.message)
	}
}

package dispatch

import (
	"context"
	"errors"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/hub/placement"
	"github.com/trainyard-dev/trainyard/internal/metrics"
)

// checklessRetryAfter paces placement of a flavor-less job that fits nowhere yet.
const checklessRetryAfter = 15 * time.Second

// WaitingPrefix begins the check message of a job waiting for room.
const WaitingPrefix = "waiting for room: "

// noPlacement turns a placement failure into the check state Kueue needs:
// Rejected when the job can never fit or no target could ever run it;
// Pending while the fleet is only full, with the quota held and the job
// woken when room frees (watch.go); Retry (requeue with backoff) when no
// target serves the flavor yet or only targets of other flavors could run
// the job, since Kueue may then admit it with another flavor.
func (r *Reconciler) noPlacement(ctx context.Context, s *state, err error) (ctrl.Result, error) {
	if errors.Is(err, placement.ErrNeverFits) || errors.Is(err, placement.ErrIneligible) {
		return ctrl.Result{}, r.reject(ctx, s, "", err.Error())
	}
	metrics.Dispatched("", metrics.ResultNoCapacity)
	if waitsForRoom(err) && !s.checkless {
		return ctrl.Result{}, r.waitForRoom(ctx, s, err)
	}
	if !s.checkless {
		// Kueue requeues it: its next pass must try, not wait for room.
		r.flight.StopWaiting(client.ObjectKeyFromObject(s.wl))
	}
	if e := r.setCheck(ctx, s, kueue.CheckStateRetry, err.Error()); e != nil {
		return ctrl.Result{}, e
	}
	r.recorder.Event(s.wl, corev1.EventTypeWarning, EventNoTarget, err.Error())
	if s.checkless {
		// No check to ask Kueue for a retry: look again later; a Target
		// change wakes the Workload sooner.
		return ctrl.Result{RequeueAfter: checklessRetryAfter}, nil
	}
	return ctrl.Result{}, nil
}

// stillWaiting reports whether the Workload waits for room, says so on its
// check, and no wake-up has offered it room since its last try: a pass on
// any other event (Kueue's own writes, a resync) would only fail again.
// A check Kueue reset, or a checkless job, tries again.
func (r *Reconciler) stillWaiting(s *state) bool {
	if s.checkless || !r.flight.Asleep(client.ObjectKeyFromObject(s.wl)) {
		return false
	}
	for _, c := range s.wl.Status.AdmissionChecks {
		if c.Name == s.check {
			return c.State == kueue.CheckStatePending && strings.HasPrefix(c.Message, WaitingPrefix)
		}
	}
	return false
}

// waitsForRoom reports whether a placement failure only needs room to free
// on a target that serves the job's flavor.
func waitsForRoom(err error) bool {
	return errors.Is(err, placement.ErrNoCapacity) && !errors.Is(err, placement.ErrOtherFlavors)
}

// waitForRoom keeps the check Pending while the job waits for room. The
// check message is written once, when the job starts to wait: the reasons
// are those of its first try, and later tries write nothing, so thousands
// of waiting jobs cost no writes while room frees one job at a time.
func (r *Reconciler) waitForRoom(ctx context.Context, s *state, err error) error {
	for _, c := range s.wl.Status.AdmissionChecks {
		if c.Name == s.check && c.State == kueue.CheckStatePending && strings.HasPrefix(c.Message, WaitingPrefix) {
			return nil
		}
	}
	if e := r.setCheck(ctx, s, kueue.CheckStatePending, WaitingPrefix+err.Error()); e != nil {
		return e
	}
	r.recorder.Event(s.wl, corev1.EventTypeNormal, EventNoTarget, err.Error())
	return nil
}

package spoke

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// TestDispatchEvents: the agent records on the Dispatch what it did, once
// the status write that says it succeeded, and nothing for a pass that did
// nothing new.
func TestDispatchEvents(t *testing.T) {
	ref := fakeRef(dispatch().Obj())
	remote := fmt.Sprintf("%s %s/%s", ref.Kind, ref.Namespace, ref.Name)
	withRemote := func(b *fakeBackend, d *v1alpha1.Dispatch) { b.put(d, backends.Status{Phase: v1alpha1.DispatchRunning}) }
	cases := map[string]struct {
		dispatch   *tytesting.DispatchWrapper
		prepare    func(*fakeBackend, *v1alpha1.Dispatch)
		failWrites int
		want       []string
	}{
		"created": {
			dispatch: ours(dispatch()),
			want:     []string{"Normal RemoteCreated created " + remote},
		},
		"nothing before the status write succeeds": {
			dispatch:   ours(dispatch()),
			failWrites: 1,
		},
		"refused with the backend's reason": {
			dispatch: ours(dispatch()),
			prepare: func(b *fakeBackend, _ *v1alpha1.Dispatch) {
				b.submitErr = fmt.Errorf("partition gpu: %w", backends.ErrRejected)
			},
			want: []string{"Warning RemoteRejected the backend refused the job: partition gpu: " + backends.ErrRejected.Error()},
		},
		"a transient submit failure is no event": {
			dispatch: ours(dispatch()),
			prepare:  func(b *fakeBackend, _ *v1alpha1.Dispatch) { b.submitErr = errors.New("connection refused") },
		},
		"an unchanged running job records nothing": {
			dispatch: ours(running(dispatch())),
			prepare:  withRemote,
		},
		"cancelled": {
			dispatch: ours(running(dispatch())).DeletionTimestamp(t0),
			prepare:  withRemote,
			want:     []string{"Normal RemoteCancelled deleted " + remote},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := tc.dispatch.Clone().Obj()
			hub := newHub(&hubRecorder{failWrites: tc.failWrites}, d)
			be := newFakeBackend()
			if tc.prepare != nil {
				tc.prepare(be, d)
			}
			rec := record.NewFakeRecorder(10)
			r := &DispatchReconciler{Hub: hub, Target: testTarget, Backend: be, Clock: testingclock.NewFakeClock(t0),
				Resync: resync, Recorder: rec}
			_, _ = r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(d)})
			if diff := cmp.Diff(tc.want, drainEvents(rec), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSelfFencedEvent: work stopped for want of a lease is recorded on its
// Dispatch when the agent reports it.
func TestSelfFencedEvent(t *testing.T) {
	d := running(ours(dispatch()).Attempt(1)).Obj()
	hub := newHub(&hubRecorder{}, d)
	clk := testingclock.NewFakeClock(t0)
	be := newFakeBackend()
	be.put(d, backends.Status{Phase: v1alpha1.DispatchRunning})
	l := newTestLease(hub, clk, be)
	l.Reader = cutHub(new(bool))
	rec := record.NewFakeRecorder(10)
	r := &DispatchReconciler{Hub: hub, Target: testTarget, Backend: be, Clock: clk, Resync: time.Minute, Lease: l, Recorder: rec}

	clk.Step(testLease)
	l.check()
	if err := l.fence(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	l.check()
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(d)}); err != nil {
		t.Fatal(err)
	}
	want := []string{"Warning SelfFenced stopped the remote work: the agent could not renew its lease on the hub"}
	if diff := cmp.Diff(want, drainEvents(rec)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// drainEvents empties a fake recorder ("type reason message" each).
func drainEvents(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, strings.TrimSpace(e))
		default:
			return out
		}
	}
}

package spoke

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// hubStub answers Target reads as a hub in the state the test sets: up
// (returns the Target with the generation gen), hanging (until the read's
// deadline), or answering err.
type hubStub struct {
	gen   int64
	hang  bool
	err   error
	reads int
}

func (h *hubStub) read(ctx context.Context) (*v1alpha1.Target, error) {
	h.reads++
	if h.hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if h.err != nil {
		return nil, h.err
	}
	return &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Name: "hpc", Generation: h.gen}}, nil
}

func TestLastTargetAnswersFromTheLastCopyWhileTheHubIsOutOfReach(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	hub := &hubStub{gen: 1}
	l := newLastTarget(&v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Name: "hpc"}}, hub.read, clk)
	ctx := context.Background()
	get := func(wantGen int64) {
		t.Helper()
		got, err := l.Get(ctx)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if got.Generation != wantGen {
			t.Fatalf("generation %d, want %d", got.Generation, wantGen)
		}
	}
	get(1)
	hub.gen = 2
	get(2) // edits apply at once

	hub.hang = true
	start := time.Now()
	get(2)
	if waited := time.Since(start); waited < targetReadTimeout || waited > targetReadTimeout+time.Second {
		t.Errorf("first read of a hanging hub took %v, want about %v", waited, targetReadTimeout)
	}
	// Until targetRetryAfter has passed, no read waits on the hub.
	reads := hub.reads
	start = time.Now()
	for i := 0; i < 5; i++ {
		get(2)
	}
	if hub.reads != reads || time.Since(start) > 100*time.Millisecond {
		t.Errorf("reads while the hub is known out of reach: %d more, %v", hub.reads-reads, time.Since(start))
	}
	hub.hang, hub.err = false, errors.New("connection refused")
	clk.Step(targetRetryAfter)
	get(2)
	if hub.reads != reads+1 {
		t.Errorf("after %v the hub is asked again: %d reads, want %d", targetRetryAfter, hub.reads, reads+1)
	}
	hub.err, hub.gen = nil, 3
	clk.Step(targetRetryAfter)
	get(3) // back in reach
}

func TestLastTargetNeverHidesAGoneOrForbiddenTarget(t *testing.T) {
	gr := schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "targets"}
	for _, err := range []error{apierrors.NewNotFound(gr, "hpc"), apierrors.NewForbidden(gr, "hpc", errors.New("no"))} {
		hub := &hubStub{err: err}
		l := newLastTarget(&v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Name: "hpc"}}, hub.read, clocktesting.NewFakeClock(time.Now()))
		if got, gotErr := l.Get(context.Background()); gotErr == nil {
			t.Errorf("%v: got %v, want the error", err, got.Name)
		}
	}
}

package spoke

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// TestKickedHeartbeat: a kick publishes a heartbeat long before the
// (hour-long) interval.
func TestKickedHeartbeat(t *testing.T) {
	target := tytesting.MakeSlurmTarget("hpc", "gpu", "gpu").Obj()
	hub := fake.NewClientBuilder().WithScheme(HubScheme()).WithObjects(target).
		WithStatusSubresource(&v1alpha1.Target{}).Build()
	kick := make(chan struct{}, 1)
	h := &Heartbeat{Hub: hub, Target: "hpc", Backend: newFakeBackend(), Clock: clock.RealClock{}, Interval: time.Hour, Kick: kick}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { _ = h.Start(ctx); close(done) }()

	beatAt := func() time.Time {
		var tg v1alpha1.Target
		if err := hub.Get(ctx, client.ObjectKey{Name: "hpc"}, &tg); err != nil || tg.Status.LastHeartbeatTime == nil {
			return time.Time{}
		}
		return tg.Status.LastHeartbeatTime.Time
	}
	waitChange := func(after time.Time) time.Time {
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if b := beatAt(); b.After(after) {
				return b
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("no heartbeat after %v", after)
		return time.Time{}
	}
	first := waitChange(time.Time{})
	time.Sleep(1100 * time.Millisecond) // heartbeat times have second precision
	kick <- struct{}{}
	waitChange(first)
	cancel()
	<-done
}

// TestHeartbeatReady: a standby is not judged on its backend; once elected,
// the agent is ready only while its backend answered the last capacity call.
func TestHeartbeatReady(t *testing.T) {
	target := tytesting.MakeKubernetesTarget("k8s", "gpu").Obj()
	hub := fake.NewClientBuilder().WithScheme(HubScheme()).WithObjects(target).
		WithStatusSubresource(&v1alpha1.Target{}).Build()
	be := newFakeBackend()
	elected := make(chan struct{})
	h := &Heartbeat{Hub: hub, Target: "k8s", Backend: be, Clock: clock.RealClock{}, Interval: time.Hour, Elected: elected}
	ready := func() error { return h.Ready(httptest.NewRequest("GET", "/readyz", nil)) }
	ctx := context.Background()

	if err := ready(); err != nil {
		t.Errorf("standby: %v, want ready", err)
	}
	close(elected)
	if err := ready(); err == nil {
		t.Error("elected before any capacity call: ready, want not ready")
	}
	be.capacityErr = errors.New("connection refused")
	if err := h.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ready(); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("backend down: %v, want its error", err)
	}
	be.capacityErr = nil
	if err := h.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ready(); err != nil {
		t.Errorf("backend back: %v, want ready", err)
	}
}

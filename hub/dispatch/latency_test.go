package dispatch

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// TestLatencyTrackerIsBoundedByWorkloads: admission-to-running is observed
// once per attempt, and the tracker keeps one entry per Workload, gone
// with the Workload: after 1,000 Workloads ran (each of them twice) and
// went, nothing is left, whether they were torn down or found deleted.
func TestLatencyTrackerIsBoundedByWorkloads(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).Build()
	r := NewReconciler(c, c, nil, clocktesting.NewFakeClock(t0), Options{})
	const workloads = 1000
	observed := 0
	for i := range workloads {
		wl := types.NamespacedName{Namespace: "team-a", Name: fmt.Sprintf("wl-%04d", i)}
		for attempt := 1; attempt <= 2; attempt++ {
			for range 3 { // every pass while it runs
				if r.latency.first(wl, fmt.Sprintf("uid-%d/%d", i, attempt)) {
					observed++
				}
			}
		}
		if i%2 == 0 {
			r.latency.forget(wl) // torn down
			continue
		}
		// Deleted without a tear-down this process saw.
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: wl}); err != nil {
			t.Fatal(err)
		}
	}
	if observed != 2*workloads {
		t.Errorf("observed %d attempts, want %d", observed, 2*workloads)
	}
	if n := len(r.latency.seen); n != 0 {
		t.Errorf("after %d Workloads went the tracker holds %d entries, want none", workloads, n)
	}
}

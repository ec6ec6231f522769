package slurm

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/trainyard-dev/trainyard/backends"
)

// TestSubmitMemoryIsBoundedByJobsInFlight: 1,000 jobs go through one
// backend (submitted, some after an uncertain submit; then run to their
// end, cancelled, or deleted by a fence; two uncertain submits made no job
// and are never looked at again), and what it remembers of its submits
// goes with them.
func TestSubmitMemoryIsBoundedByJobsInFlight(t *testing.T) {
	ctx := context.Background()
	f := &fakeSlurmrestd{stall: map[int]bool{}}
	b, clk := fakeBackend(t, f)
	const jobs = 1000
	for i := range jobs {
		clk.Step(time.Second)
		d := dispatch(caseSpec{})
		d.Name, d.Spec.Workload.UID = fmt.Sprintf("d%04d", i), types.UID(fmt.Sprintf("uid-%04d", i))
		if i < 4 {
			// slurmrestd gives no answer; slurmctld took every other one.
			f.mu.Lock()
			f.stall[f.submits+1] = i%2 == 0
			f.mu.Unlock()
			if _, err := b.Submit(ctx, d); !errors.Is(err, ErrSubmitUncertain) {
				t.Fatalf("stalled submit: %v, want ErrSubmitUncertain", err)
			}
			clk.Step(b.settle() + time.Second)
			if _, err := b.ListJobs(ctx); err != nil {
				t.Fatal(err)
			}
			if i%2 == 1 {
				// No job was made, and the Dispatch goes before this
				// replica looks for it again (another replica, now
				// leading, saw it deleted).
				continue
			}
		}
		ref, err := b.Submit(ctx, d)
		if err != nil {
			t.Fatalf("submit %s: %v", d.Name, err)
		}
		d.Status.Remote = ref // the agent records it on the Dispatch
		clk.Step(time.Second)
		if _, err := b.ListJobs(ctx); err != nil { // the poller
			t.Fatal(err)
		}
		switch i % 3 {
		case 0: // runs to its end, observed once the poller listed it
			if _, err := b.Observe(ctx, d); err != nil {
				t.Fatal(err)
			}
		case 1: // the Dispatch is deleted: cancelled until gone
			for gone := false; !gone; {
				if gone, err = b.Cancel(ctx, d); err != nil {
					t.Fatal(err)
				}
			}
		case 2: // the fence deletes it
			w := backends.RemoteWork{Ref: *ref, DispatchNamespace: d.Namespace, DispatchName: d.Name, Attempt: d.Spec.Attempt}
			if err := b.Delete(ctx, w); err != nil {
				t.Fatal(err)
			}
		}
		// Ended, and MinJobAge later slurmctld forgets it.
		f.mu.Lock()
		f.forgotten, f.jobs = f.forgotten+len(f.jobs), f.jobs[:0]
		f.mu.Unlock()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if n, m, u := len(b.submitted), len(b.submittedAt), len(b.uncertain); n+m+u != 0 {
		t.Errorf("after %d jobs the backend remembers %d submits, %d submit times and %d uncertain submits; want none", jobs, n, m, u)
	}
	if f.submits != jobs {
		t.Errorf("slurmrestd saw %d submits, want %d (two stalled ones taken were adopted)", f.submits, jobs)
	}
}

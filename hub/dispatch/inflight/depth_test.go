package inflight

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// TestQueueDepthFollowsStarts: a Slurm target's queue deepens past its
// spec to the jobs that started there within twice the refill time the
// watch measured, never past its GPUs; the deeper queue wakes the waiting
// as it grows, stays that deep while the peak is younger than
// startHistory (that wave of jobs ends together later), and goes back to
// the spec after. A depth of 0 stays 0, and its target is not timed.
func TestQueueDepthFollowsStarts(t *testing.T) {
	cases := map[string]struct {
		spec       int32
		wantDeep   int32
		wantWoken  bool
		wantHeld   int32
		wantLater  int32
		refillWant time.Duration
	}{
		"deepens to the starts, up to the GPUs": {spec: 2, wantDeep: 4, wantWoken: true, wantHeld: 4, wantLater: 2, refillWant: 3 * time.Second},
		"depth 0 keeps queueing off, untimed":   {spec: 0, wantDeep: 0, wantHeld: 0, wantLater: 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			now := t0
			f := New(time.Now)
			f.now = func() time.Time { return now }
			target := tytesting.MakeSlurmTarget("hpc", "h100", "gpu").Available().SlurmQueueDepth(tc.spec).Obj()
			target.Status.Capacity = corev1.ResourceList{v1alpha1.GPUResource: resource.MustParse("4")}
			f.RecordTarget(target)
			for i := range 3 {
				joinLine(f, types.NamespacedName{Namespace: "team-a", Name: fmt.Sprintf("waiting-%d", i)}, waitingFor(1, "h100"))
			}
			_, woken := startJobs(f, 6, &now)
			f.mu.Lock()
			defer f.mu.Unlock()
			var refill time.Duration
			if g := f.gauges["hpc"]; g != nil {
				refill = g.refill()
			}
			if refill != tc.refillWant {
				t.Errorf("refill time %s, want %s", refill, tc.refillWant)
			}
			if got := f.depthLocked(target, now); got != tc.wantDeep {
				t.Errorf("depth right after the starts %d, want %d", got, tc.wantDeep)
			}
			if woken != tc.wantWoken {
				t.Errorf("the starts woke the waiting: %v, want %v", woken, tc.wantWoken)
			}
			now = now.Add(2*refillMargin*3*time.Second + time.Second)
			if got := f.depthLocked(target, now); got != tc.wantHeld {
				t.Errorf("depth a while after the starts %d, want %d", got, tc.wantHeld)
			}
			now = now.Add(startHistory)
			if got := f.depthLocked(target, now); got != tc.wantLater {
				t.Errorf("depth once the peak is older than startHistory %d, want %d", got, tc.wantLater)
			}
		})
	}
}

// startJobs books n 1-GPU jobs on hpc at once, has them submitted 1 s
// later and seen running 2 s after Slurm started them, moving the record's
// clock (*now) on. It returns them and whether the starts woke the waiting.
func startJobs(f *Record, n int, now *time.Time) ([]*v1alpha1.Dispatch, bool) {
	var ds []*v1alpha1.Dispatch
	f.mu.Lock()
	for i := range n {
		d := pendingDispatch(fmt.Sprintf("job-%d", i), "hpc", v1alpha1.DispatchPending)
		f.bookLocked(Key(d.Namespace, d.Name), "hpc", d.Spec.Workload.UID, types.NamespacedName{Name: d.Name}, 1, nil, false, *now)
		ds = append(ds, d)
	}
	f.mu.Unlock()
	*now = now.Add(time.Second)
	for _, d := range ds {
		d.Status.Phase = v1alpha1.DispatchSubmitted
		f.Observe(d, 1)
	}
	started := metav1.NewTime(*now)
	*now = now.Add(2 * time.Second)
	woken := false
	for _, d := range ds {
		d.Status.Phase, d.Status.StartTime = v1alpha1.DispatchRunning, &started
		if len(f.Observe(d, 1)) > 0 {
			woken = true
		}
	}
	return ds, woken
}

// TestQueueDepthForgetsStartsOnceTargetEmpties: the peak holds while any
// of the hub's jobs is on the target, and is forgotten when the last one
// ends.
func TestQueueDepthForgetsStartsOnceTargetEmpties(t *testing.T) {
	now := t0
	f := New(time.Now)
	f.now = func() time.Time { return now }
	target := tytesting.MakeSlurmTarget("hpc", "h100", "gpu").Available().SlurmQueueDepth(2).Obj()
	target.Status.Capacity = corev1.ResourceList{v1alpha1.GPUResource: resource.MustParse("8")}
	f.RecordTarget(target)
	ds, _ := startJobs(f, 6, &now)
	for i, d := range ds {
		f.mu.Lock()
		got := f.depthLocked(target, now)
		f.mu.Unlock()
		if got != 6 {
			t.Fatalf("depth with %d of the 6 jobs still on the target: %d, want 6", len(ds)-i, got)
		}
		d.Status.Phase = v1alpha1.DispatchSucceeded
		f.Observe(d, 1)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if got := f.depthLocked(target, now); got != 2 {
		t.Errorf("depth once the last job ended %d, want the spec's 2", got)
	}
}

// TestPeakStarts: the most starts within any window, not only the latest.
func TestPeakStarts(t *testing.T) {
	at := func(secs ...float64) []time.Time {
		var out []time.Time
		for _, s := range secs {
			out = append(out, t0.Add(time.Duration(s*float64(time.Second))))
		}
		return out
	}
	cases := map[string]struct {
		starts []time.Time
		want   int
	}{
		"none":                            {want: 0},
		"one":                             {starts: at(5), want: 1},
		"a wave long ago beats a trickle": {starts: at(0, 0.5, 1, 1.5, 30, 60, 90), want: 4},
		"the window's ends count":         {starts: at(0, 4, 8), want: 2},
		"the latest window is the peak":   {starts: at(0, 10, 20, 20.5, 21, 22), want: 4},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := peakStarts(tc.starts, 4*time.Second); got != tc.want {
				t.Errorf("peak %d, want %d", got, tc.want)
			}
		})
	}
}

// TestRefillSamplesAreBounded: a measurement longer than a refill could
// take (an outage, a skewed clock) or negative moves no average.
func TestRefillSamplesAreBounded(t *testing.T) {
	avg := 2 * time.Second
	for _, d := range []time.Duration{-time.Second, maxRefillSample + time.Second} {
		sample(&avg, d)
	}
	if avg != 2*time.Second {
		t.Errorf("average %s after out-of-bounds samples, want 2s", avg)
	}
	sample(&avg, 7*time.Second)
	if want := 3 * time.Second; avg != want {
		t.Errorf("average %s after a 7s sample, want %s", avg, want)
	}
}

package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/internal/metrics"
	tyt "github.com/trainyard-dev/trainyard/internal/testing"
)

// lastReports reads the hub registry's last-report gauge: seconds by
// "namespace/trainjob@target".
func lastReports(t *testing.T) map[string]float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "trainyard_trainjob_progress_last_report_timestamp_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			got[l["trainjob_namespace"]+"/"+l["trainjob"]+"@"+l["target"]] = m.GetGauge().GetValue()
		}
	}
	return got
}

// TestNoteProgress: a series exists only while the live attempt runs and
// has reported in that attempt; any other state removes it.
func TestNoteProgress(t *testing.T) {
	at := time.Unix(5000, 0)
	running := func() *tyt.DispatchWrapper {
		return tyt.MakeDispatch("d", "agents", "spoke-1").Attempt(2).Phase(v1alpha1.DispatchRunning)
	}
	cases := map[string]struct {
		live        *v1alpha1.Dispatch
		tearingDown bool
		want        map[string]float64
	}{
		"running and reported": {
			live: running().Progress(report(30, at)).Obj(),
			want: map[string]float64{"team-a/tj-d@spoke-1": 5000},
		},
		"running, never reported": {live: running().Obj(), want: map[string]float64{}},
		"report of an older attempt": {
			live: func() *v1alpha1.Dispatch {
				d := running().Progress(report(30, at)).Obj()
				d.Status.ObservedAttempt = 1
				return d
			}(),
			want: map[string]float64{},
		},
		"submitted, not running yet": {
			live: running().Phase(v1alpha1.DispatchSubmitted).Progress(report(30, at)).Obj(), want: map[string]float64{},
		},
		"finished": {
			live: running().Phase(v1alpha1.DispatchSucceeded).Progress(report(100, at)).Obj(), want: map[string]float64{},
		},
		"being torn down": {
			live: running().Progress(report(30, at)).Obj(), tearingDown: true, want: map[string]float64{},
		},
		"between attempts": {want: map[string]float64{}},
	}
	wl := types.NamespacedName{Namespace: "team-a", Name: "wl-d"}
	defer metrics.ForgetProgress(wl.String())
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			// Each case starts from a job that was shown running.
			noteProgress(wl, &state{live: running().Progress(report(10, at)).Obj()}, false)
			noteProgress(wl, &state{live: tc.live}, tc.tearingDown)
			if diff := cmp.Diff(tc.want, lastReports(t)); diff != "" {
				t.Errorf("last-report series (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReconcileForgetsProgressOfDeletedWorkload: once the Workload is gone
// (its TrainJob deleted), its job's series goes too.
func TestReconcileForgetsProgressOfDeletedWorkload(t *testing.T) {
	c, _ := statusClient(t)
	r := NewReconciler(c, c, record.NewFakeRecorder(10), clocktesting.NewFakeClock(tProgress), Options{})
	wl := types.NamespacedName{Namespace: "team-a", Name: "wl-gone"}
	defer metrics.ForgetProgress(wl.String())
	noteProgress(wl, &state{live: tyt.MakeDispatch("gone", "agents", "spoke-1").Phase(v1alpha1.DispatchRunning).
		Progress(report(10, tProgress)).Obj()}, false)
	if got := lastReports(t); len(got) != 1 {
		t.Fatalf("series before = %v, want the job's", got)
	}
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: wl}); err != nil {
		t.Fatal(err)
	}
	if got := lastReports(t); len(got) != 0 {
		t.Errorf("series after the Workload went = %v, want none", got)
	}
}

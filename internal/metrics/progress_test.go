package metrics

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// TestProgressGauges: the registry the hub serves has a running job's
// progress and last report time, labelled by its hub TrainJob and target;
// a job without a percentage has only the time; a forgotten job has
// neither, and a job observed again replaces its series (a requeue to
// another target leaves none under the old one).
func TestProgressGauges(t *testing.T) {
	ObserveProgress("team-a/wl-1", Progress{Namespace: "team-a", TrainJob: "llm", Target: "s1", Percent: ptr.To[int32](40),
		LastReport: time.Unix(1000, 500e6)})
	ObserveProgress("team-a/wl-1", Progress{Namespace: "team-a", TrainJob: "llm", Target: "s2", Percent: ptr.To[int32](42),
		LastReport: time.Unix(1100, 0)})
	ObserveProgress("team-b/wl-2", Progress{Namespace: "team-b", TrainJob: "no-pct", Target: "s1", LastReport: time.Unix(900, 0)})
	ObserveProgress("team-c/wl-3", Progress{Namespace: "team-c", TrainJob: "done", Target: "s1", Percent: ptr.To[int32](100),
		LastReport: time.Unix(800, 0)})
	defer ForgetProgress("team-a/wl-1")
	defer ForgetProgress("team-b/wl-2")

	ForgetProgress("team-c/wl-3")

	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		switch f.GetName() {
		case "trainyard_trainjob_progress_percent", "trainyard_trainjob_progress_last_report_timestamp_seconds":
		default:
			continue
		}
		for _, m := range f.GetMetric() {
			key := f.GetName()
			for _, l := range m.GetLabel() {
				key += " " + l.GetName() + "=" + l.GetValue()
			}
			got[key] = m.GetGauge().GetValue()
		}
	}
	want := map[string]float64{
		"trainyard_trainjob_progress_percent target=s2 trainjob=llm trainjob_namespace=team-a":                          42,
		"trainyard_trainjob_progress_last_report_timestamp_seconds target=s2 trainjob=llm trainjob_namespace=team-a":    1100,
		"trainyard_trainjob_progress_last_report_timestamp_seconds target=s1 trainjob=no-pct trainjob_namespace=team-b": 900,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("progress series (-want +got):\n%s", diff)
	}
}

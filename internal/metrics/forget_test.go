package metrics

import (
	"testing"
	"time"

	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// TestForgetTargetEverywhere: after ForgetTarget, the registry the managers
// serve holds no series of the deleted target in any family, whatever its
// other labels (result, le), and the other target keeps its own.
func TestForgetTargetEverywhere(t *testing.T) {
	for _, target := range []string{"gone-everywhere", "kept-everywhere"} {
		for _, result := range []string{ResultDispatched, ResultNoCapacity, ResultRefused} {
			Dispatched(target, result)
		}
		ObserveAdmissionToRunning(target, time.Second)
		ObserveDecision(target, time.Now())
		LeaseAge.WithLabelValues(target).Set(3)
		ObserveHeartbeat(target, time.Unix(100, 0), time.Minute)
	}
	defer ForgetTarget("kept-everywhere")

	ForgetTarget("gone-everywhere")

	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	kept := map[string]bool{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != "target" {
					continue
				}
				switch l.GetValue() {
				case "gone-everywhere":
					t.Errorf("%s still has a series of the deleted target: %v", f.GetName(), m.GetLabel())
				case "kept-everywhere":
					kept[f.GetName()] = true
				}
			}
		}
	}
	for _, name := range []string{"trainyard_dispatches_total", "trainyard_admission_to_running_seconds",
		"trainyard_decision_duration_seconds", "trainyard_target_lease_age_seconds"} {
		if !kept[name] {
			t.Errorf("%s lost the other target's series", name)
		}
	}
}

package statusapi

import (
	"fmt"
	"unicode/utf8"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
)

// Trainer v2.3's bounds on TrainerStatus (its CRD's validation markers),
// which its status server leaves to the API server and this agent checks
// itself, since it writes a report to the hub later, not in the request.
const (
	MaxMetrics         = 256
	MaxMetricFieldLen  = 64
	MaxProgressPercent = 100
	// MaxBodyBytes is the request body limit of Trainer's status server.
	MaxBodyBytes = 1 << 16
)

// Validate checks ts against Trainer's bounds and returns the first
// violation.
func Validate(ts *trainer.TrainerStatus) error {
	if ts == nil {
		return nil
	}
	if ts.LastUpdatedTime.IsZero() {
		return fmt.Errorf("trainerStatus.lastUpdatedTime is required when trainerStatus is present")
	}
	if p := ts.ProgressPercentage; p != nil && (*p < 0 || *p > MaxProgressPercent) {
		return fmt.Errorf("trainerStatus.progressPercentage: %d is not between 0 and %d", *p, MaxProgressPercent)
	}
	if s := ts.EstimatedRemainingSeconds; s != nil && *s < 0 {
		return fmt.Errorf("trainerStatus.estimatedRemainingSeconds: %d is negative", *s)
	}
	if len(ts.Metrics) > MaxMetrics {
		return fmt.Errorf("trainerStatus.metrics: %d items, at most %d", len(ts.Metrics), MaxMetrics)
	}
	for i, m := range ts.Metrics {
		for field, v := range map[string]string{"name": m.Name, "value": m.Value} {
			// The API server counts characters, not bytes.
			if n := utf8.RuneCountInString(v); n < 1 || n > MaxMetricFieldLen {
				return fmt.Errorf("trainerStatus.metrics[%d].%s: length %d is not between 1 and %d", i, field, n, MaxMetricFieldLen)
			}
		}
	}
	return nil
}

package v1alpha1

const (
	// AnnotationRefusedBy on a Workload records the targets whose backend
	// refused the job after placement, as JSON: target name to Refusal.
	// Placement treats them as ineligible for this job until the target's
	// spec changes (its generation moves on).
	AnnotationRefusedBy = "trainyard.dev/refused-by"
)

// Refusal is one target's refusal of one job.
type Refusal struct {
	// Generation is the Target's metadata.generation when it refused.
	Generation int64 `json:"generation"`
	// Reason is the backend's word, shown to the user.
	Reason string `json:"reason"`
}

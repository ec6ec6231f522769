package v1alpha1

// Labels and annotations trainyard puts on Dispatches, on hub Workloads and
// on remote work.
const (
	// LabelWorkloadUID, LabelWorkloadNamespace and LabelWorkloadName tie a
	// Dispatch (and its remote work) to its Workload.
	LabelWorkloadUID       = "trainyard.dev/workload-uid"
	LabelWorkloadNamespace = "trainyard.dev/workload-namespace"
	LabelWorkloadName      = "trainyard.dev/workload-name"
	// LabelTarget names the Target a Dispatch runs on.
	LabelTarget = "trainyard.dev/target"
	// LabelAttempt is the Dispatch's attempt, its fencing epoch.
	LabelAttempt = "trainyard.dev/attempt"

	// AnnotationAttempt on a Workload is the last attempt the hub started.
	// It only grows, so a new attempt never reuses the name of stale remote
	// work.
	AnnotationAttempt = "trainyard.dev/attempt"
	// AnnotationGPUs on a Dispatch is the job's total GPU request, counted
	// as in flight until the target's heartbeat shows it.
	AnnotationGPUs = "trainyard.dev/gpus"

	// WorkloadFinalizer holds a hub Workload until its Dispatches, and so
	// its remote work, are gone.
	WorkloadFinalizer = "trainyard.dev/dispatch"

	// GPUResource is the resource name GPUs are counted by.
	GPUResource = "nvidia.com/gpu"
)

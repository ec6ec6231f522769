package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Labels and annotations trainyard puts on Dispatches, on hub Workloads and
// on remote work.
const (
	// LabelWorkloadUID, LabelWorkloadNamespace and LabelWorkloadName tie a
	// Dispatch (and its remote work) to its Workload. Name and namespace
	// are stored as LabelValue: select by LabelValue(name) and compare the
	// full name (Dispatch.Spec.Workload) after listing.
	LabelWorkloadUID       = "trainyard.dev/workload-uid"
	LabelWorkloadNamespace = "trainyard.dev/workload-namespace"
	LabelWorkloadName      = "trainyard.dev/workload-name"
	// LabelTrainJobUID on remote work is the UID of the hub TrainJob it runs.
	LabelTrainJobUID = "trainyard.dev/trainjob-uid"
	// LabelTarget names the Target a Dispatch runs on, as LabelValue.
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
	// AnnotationQueued on a Dispatch, "true", says the hub sent it beyond
	// what its target had free, to wait in the target's own queue (Slurm's,
	// spec.slurm.queueDepth); it counts against that depth until it runs.
	AnnotationQueued = "trainyard.dev/queued"

	// The runtime pin (hub/snapshot): at creation the hub copies a queued
	// TrainJob's runtime into a pinned copy and records it on the job.
	//
	// LabelPinnedRuntime marks pinned runtime copies; the pinned-runtime
	// policy refuses any change to their spec.
	LabelPinnedRuntime = "trainyard.dev/pinned-runtime"
	// AnnotationRuntimeSource on a TrainJob and its pinned runtime names the
	// runtime the copy was taken from, as Kind/name.
	AnnotationRuntimeSource = "trainyard.dev/runtime-source"
	// AnnotationRuntimeHash is the pinned spec's content hash, on the
	// TrainJob and its pinned runtime; on remote JobSets it records the
	// runtime snapshot they were rendered from, for people comparing a
	// spoke job with its Dispatch.
	AnnotationRuntimeHash = "trainyard.dev/runtime-hash"
	// AnnotationPinnedAt on a pinned copy is when a TrainJob was last
	// pinned to it (RFC 3339); the collector keeps a copy for a grace
	// period after it.
	AnnotationPinnedAt = "trainyard.dev/pinned-at"

	// LabelDispatchNamespace and LabelDispatchName on remote work name the
	// Dispatch that made it, so the agent can find it. Dispatch names and
	// namespaces are DNS labels (the hub makes them so), and so label values
	// as they are.
	LabelDispatchNamespace = "trainyard.dev/dispatch-namespace"
	LabelDispatchName      = "trainyard.dev/dispatch-name"
	// LabelTenant on a spoke namespace names the hub namespace it serves.
	LabelTenant = "trainyard.dev/tenant"
	// AnnotationLeaderWorkerSetFinished records on a LeaderWorkerSet how its
	// job ended (JSON). A LeaderWorkerSet has no notion of done: its pods
	// restart their containers, so the first exit seen is written down here
	// and the set is scaled to zero, which frees its GPUs and keeps the
	// record.
	AnnotationLeaderWorkerSetFinished = "trainyard.dev/finished"
	// AnnotationPodSetRequiredTopology and AnnotationPodSetPreferredTopology
	// on a runtime's pod template are trainyard's own spelling of Kueue's
	// podset topology annotations (hub/placement). With Kueue's
	// TopologyAwareScheduling gate on, Kueue admits a pod set carrying its
	// annotations only to a TAS flavor, and a hub has no nodes to back one;
	// the trainyard annotations ask trainyard alone, on any flavor.
	AnnotationPodSetRequiredTopology  = "trainyard.dev/podset-required-topology"
	AnnotationPodSetPreferredTopology = "trainyard.dev/podset-preferred-topology"

	// WorkloadFinalizer holds a hub Workload until its Dispatches, and so
	// its remote work, are gone.
	WorkloadFinalizer = "trainyard.dev/dispatch"

	// GPUResource is the resource name GPUs are counted by.
	GPUResource = "nvidia.com/gpu"
)

// WithoutTrainyardBookkeeping is a hub Workload's annotations and
// finalizers without trainyard's own bookkeeping on it (the attempt
// annotation and the Workload finalizer): what the hub's watch filters
// compare to tell trainyard's writes from everyone else's. The arguments
// are not changed.
func WithoutTrainyardBookkeeping(annotations map[string]string, finalizers []string) (map[string]string, []string) {
	ann := maps.Clone(annotations)
	delete(ann, AnnotationAttempt)
	fin := slices.DeleteFunc(slices.Clone(finalizers), func(f string) bool { return f == WorkloadFinalizer })
	return ann, fin
}

// labelHashLen is how many hex digits of SHA-256 a shortened label value
// ends with.
const labelHashLen = 10

// LabelValue is s as a label value: s itself when it is one (at most 63
// valid characters), else its first characters followed by a hash of all
// of s, at most 63 characters in all. Several values may share one
// shortened form, so whoever selects by it compares the full value, kept
// in the object's spec or annotations, after listing.
func LabelValue(s string) string {
	if len(validation.IsValidLabelValue(s)) == 0 {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	hash := hex.EncodeToString(sum[:])[:labelHashLen]
	keep := func(r rune) rune {
		if r == '-' || r == '_' || r == '.' || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9') {
			return r
		}
		return '-'
	}
	prefix := strings.Map(keep, s)
	if max := validation.LabelValueMaxLength - labelHashLen - 1; len(prefix) > max {
		prefix = prefix[:max]
	}
	prefix = strings.Trim(prefix, "-_.")
	if prefix == "" {
		return hash
	}
	return prefix + "-" + hash
}

// KueueRuntimePatchManager is the manager of the runtime patch Kueue's
// TrainJob integration adds to an admitted TrainJob (the hub flavor's node
// selectors and tolerations, and scheduling gates only the hub's Kueue
// would lift). The hub's own integration (hub/kueuejob) writes it, re-apply
// keeps it, and remote renders drop it. Kueue exports no constant for it.
const KueueRuntimePatchManager = "kueue.x-k8s.io/manager"

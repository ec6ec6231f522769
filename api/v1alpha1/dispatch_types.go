package v1alpha1

import (
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// DispatchPhase is where a Dispatch's remote work is in its life.
// +kubebuilder:validation:Enum=Pending;Submitted;Running;Succeeded;Failed;Cancelled;Rejected
type DispatchPhase string

const (
	// DispatchPending: written by the hub, not yet acted on by the agent.
	DispatchPending DispatchPhase = "Pending"
	// DispatchSubmitted: the remote job exists and has not started running.
	DispatchSubmitted DispatchPhase = "Submitted"
	// DispatchRunning: the remote job is running.
	DispatchRunning DispatchPhase = "Running"
	// DispatchSucceeded: the remote job finished successfully.
	DispatchSucceeded DispatchPhase = "Succeeded"
	// DispatchFailed: the remote job finished unsuccessfully.
	DispatchFailed DispatchPhase = "Failed"
	// DispatchCancelled: the remote job was cancelled, by the hub or on the remote.
	DispatchCancelled DispatchPhase = "Cancelled"
	// DispatchRejected: the backend refused the job and retrying the same
	// request cannot help (invalid for this target).
	DispatchRejected DispatchPhase = "Rejected"
)

// IsFinal reports whether no further phase change can follow.
func (p DispatchPhase) IsFinal() bool {
	switch p {
	case DispatchSucceeded, DispatchFailed, DispatchCancelled, DispatchRejected:
		return true
	}
	return false
}

// RemoteCleanupFinalizer is held by the agent on every Dispatch whose remote
// work may exist, so deleting a Dispatch on the hub waits until the remote
// job is gone.
const RemoteCleanupFinalizer = "trainyard.dev/remote-cleanup"

// DispatchSpec binds one admitted Workload attempt to one Target. It is
// written once by the hub and never changed: a new attempt is a new Dispatch.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable; a new attempt is a new Dispatch"
type DispatchSpec struct {
	// workload is the Kueue Workload this dispatch runs.
	// +required
	Workload WorkloadReference `json:"workload"`

	// targetName is the Target chosen by placement.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	TargetName string `json:"targetName"`

	// attempt counts dispatches of this Workload, from 1. It is the fencing
	// epoch: remote work labelled with an older attempt than the live
	// Dispatch is stale and is deleted by the agent.
	// +required
	// +kubebuilder:validation:Minimum=1
	Attempt int32 `json:"attempt"`

	// podSets are Kueue's pod sets with their counts, flavors and the
	// topology domain placement chose for them.
	// +required
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	PodSets []PodSetPlacement `json:"podSets"`

	// runtime is the snapshot of the TrainingRuntime or ClusterTrainingRuntime
	// taken at dispatch; later edits to the runtime never reach this job.
	// +required
	Runtime RuntimeSnapshot `json:"runtime"`

	// trainJob is the TrainJob as submitted on the hub.
	// +required
	TrainJob TrainJobSnapshot `json:"trainJob"`
}

// WorkloadReference identifies a Kueue Workload on the hub.
type WorkloadReference struct {
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// uid of the Workload; remote names derive from it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	UID types.UID `json:"uid"`
}

// PodSetPlacement is one Kueue pod set as placed on the target.
type PodSetPlacement struct {
	// name of the pod set (the Trainer replicated job: node, launcher, ...).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// count of pods.
	// +required
	// +kubebuilder:validation:Minimum=0
	Count int32 `json:"count"`

	// gpusPerPod is each pod's GPU request, so the hub can book the GPUs of
	// a Dispatch in flight on the nodes its pods were assigned.
	// +optional
	// +kubebuilder:validation:Minimum=0
	GPUsPerPod int64 `json:"gpusPerPod,omitempty"`

	// flavors Kueue assigned, by resource name.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	Flavors map[string]string `json:"flavors,omitempty"`

	// topology is where the pods go; unset means anywhere on the target.
	// +optional
	Topology *TopologyAssignment `json:"topology,omitempty"`
}

// TopologyAssignment places pods into topology domains.
// +kubebuilder:validation:XValidation:rule="self.domains.all(d, size(d.values) == size(self.levels))",message="every domain gives one value per level"
type TopologyAssignment struct {
	// levels are the topology levels (node label keys or Slurm levels) the
	// domain values refer to, widest first.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=317
	Levels []string `json:"levels"`

	// domains with their pod counts.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=1000
	Domains []TopologyDomainAssignment `json:"domains"`

	// advisory marks the assignment of a pod set that asked for no
	// topology: the domains are where the hub booked its GPUs until the
	// target's next capacity reading counts the job, not where its pods
	// must run, and a backend leaves the target's own scheduler free to
	// place them. A Slurm job pinned to the node the hub guessed waits for
	// that node while others free up. Unset: the pods run in these
	// domains.
	// +optional
	Advisory bool `json:"advisory,omitempty"`
}

// TopologyDomainAssignment is a count of pods placed in one domain.
type TopologyDomainAssignment struct {
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=253
	Values []string `json:"values"`
	// +required
	// +kubebuilder:validation:Minimum=1
	Count int32 `json:"count"`
}

// RuntimeKind is the kind of Trainer runtime a TrainJob refers to.
// +kubebuilder:validation:Enum=TrainingRuntime;ClusterTrainingRuntime
type RuntimeKind string

const (
	RuntimeKindTrainingRuntime        RuntimeKind = "TrainingRuntime"
	RuntimeKindClusterTrainingRuntime RuntimeKind = "ClusterTrainingRuntime"
)

// RuntimeSnapshot is an immutable copy of a Trainer runtime's spec.
type RuntimeSnapshot struct {
	// kind and name of the runtime the copy was taken from.
	// +required
	Kind RuntimeKind `json:"kind"`
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// hash is "sha256:" and the hex digest of spec's canonical JSON.
	// +required
	// +kubebuilder:validation:Pattern=`^sha256:[0-9a-f]{64}$`
	Hash string `json:"hash"`

	// spec is the runtime's spec at dispatch.
	// +required
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	Spec runtime.RawExtension `json:"spec"`
}

// TrainJobSnapshot is the hub TrainJob as it was at dispatch.
type TrainJobSnapshot struct {
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	UID types.UID `json:"uid"`
	// spec of the TrainJob.
	// +required
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	Spec runtime.RawExtension `json:"spec"`
}

// RemoteRef names the remote object or job that runs a Dispatch.
type RemoteRef struct {
	// kind of remote work: JobSet, LeaderWorkerSet or SlurmJob.
	// +required
	// +kubebuilder:validation:Enum=JobSet;LeaderWorkerSet;SlurmJob
	Kind string `json:"kind"`
	// namespace on a Kubernetes spoke.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
	// name of the remote object, or the Slurm job name.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// id is the Slurm job id.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	ID string `json:"id,omitempty"`
	// userID is the Unix user id a Slurm job runs as, recorded by the agent
	// while slurmctld knows the job. The agent reads the job's output only
	// from files this user owns, also once slurmctld has forgotten the job
	// (accounting records the user's name, not the id).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4294967294
	UserID *int64 `json:"userID,omitempty"`
}

// String names the remote work for a person, as events, check messages and
// the CLI print it: "JobSet jobs-team-a/x", "SlurmJob x (id 42)". A nil ref
// is "".
func (r *RemoteRef) String() string {
	if r == nil {
		return ""
	}
	name := r.Name
	if r.Namespace != "" {
		name = r.Namespace + "/" + name
	}
	if r.ID != "" {
		name += " (id " + r.ID + ")"
	}
	return r.Kind + " " + name
}

// ReplicaStatus counts the pods (or Slurm tasks) of one pod set.
type ReplicaStatus struct {
	// +required
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// +optional
	Active int32 `json:"active,omitempty"`
	// +optional
	Ready int32 `json:"ready,omitempty"`
	// +optional
	Succeeded int32 `json:"succeeded,omitempty"`
	// +optional
	Failed int32 `json:"failed,omitempty"`
}

// DispatchStatus is written by the agent that runs the Dispatch.
type DispatchStatus struct {
	// phase of the remote work.
	// +optional
	Phase DispatchPhase `json:"phase,omitempty"`

	// reason is a CamelCase word for the last phase change.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Reason string `json:"reason,omitempty"`

	// message explains the last phase change to a person.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	Message string `json:"message,omitempty"`

	// remote names the remote work once it exists.
	// +optional
	Remote *RemoteRef `json:"remote,omitempty"`

	// replicas per pod set.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	Replicas []ReplicaStatus `json:"replicas,omitempty"`

	// exitCode of a finished Slurm job or failed main container.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`

	// startTime is when the remote work started running.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// countedFromReading is the first capacity reading of the Target
	// (Target status.capacityReading) that counts this work's resources as
	// used, set by the agent once it saw the work running. 0: not known;
	// the hub then counts the work as in flight until a heartbeat later
	// than startTime.
	// +optional
	// +kubebuilder:validation:Minimum=0
	CountedFromReading int64 `json:"countedFromReading,omitempty"`

	// completionTime is when the remote work reached a final phase.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// submitFailures counts the agent's failed tries in a row to create the
	// remote work (errors other than the backend's refusal); the Accepted
	// condition, False with reason SubmitFailing, dates the first. Past a
	// bound of both the agent rejects the Dispatch (reason SubmitFailing).
	// A created remote resets it.
	// +optional
	// +kubebuilder:validation:Minimum=0
	SubmitFailures int32 `json:"submitFailures,omitempty"`

	// conditions: Accepted (the remote exists), Running, Finished.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedAttempt is the attempt the status describes.
	// +optional
	ObservedAttempt int32 `json:"observedAttempt,omitempty"`

	// trainerStatus is the latest progress report the job's processes
	// posted to the agent's status endpoint for this attempt (Trainer's
	// TrainJob status API), validated by the agent. It is Trainer's own
	// type, so the CRD carries Trainer's bounds (at most 256 metrics of
	// 64-character names and values, progress 0..100); the hub copies it
	// into the TrainJob's status.trainerStatus.
	// +optional
	TrainerStatus *trainer.TrainerStatus `json:"trainerStatus,omitempty"`

	// progressHistory is this attempt's reports over its life, bounded
	// (ProgressHistory): the agent adds each report it writes here. The hub
	// copies it onto the TrainJob (AnnotationProgressHistory).
	// +optional
	ProgressHistory *ProgressHistory `json:"progressHistory,omitempty"`
}

// Dispatch records that one attempt of one admitted Kueue Workload runs on
// one Target. It lives in the target's agent namespace on the hub; the agent
// pulls it, runs it and reports back into its status.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tyd
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.targetName`
// +kubebuilder:printcolumn:name="Workload",type=string,JSONPath=`.spec.workload.name`
// +kubebuilder:printcolumn:name="Attempt",type=integer,JSONPath=`.spec.attempt`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Remote",type=string,JSONPath=`.status.remote.name`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Dispatch struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec DispatchSpec `json:"spec"`
	// +optional
	Status DispatchStatus `json:"status,omitempty"`
}

// DispatchList is a list of Dispatches.
// +kubebuilder:object:root=true
type DispatchList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Dispatch `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Dispatch{}, &DispatchList{})
}

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A LogRequest is how a tenant reads a TrainJob's output: created in the
// TrainJob's own namespace, it is relayed by the hub to the agent running
// the job once a SubjectAccessReview of its requester allows it, and the
// answer is copied into its status. Tenants never touch Dispatches or the
// agent namespaces. The hub deletes a LogRequest LogRequestTTL after it was
// answered.

// LogRequestPhase is where a LogRequest stands.
// +kubebuilder:validation:Enum=Pending;Answered;Failed;Denied
type LogRequestPhase string

const (
	// LogRequestPending: relayed or about to be, no answer yet.
	LogRequestPending LogRequestPhase = "Pending"
	// LogRequestAnswered: status.log holds the output.
	LogRequestAnswered LogRequestPhase = "Answered"
	// LogRequestFailed: no output could be read; status.message says why.
	LogRequestFailed LogRequestPhase = "Failed"
	// LogRequestDenied: the requester may not read this TrainJob's logs.
	LogRequestDenied LogRequestPhase = "Denied"
)

// IsFinal reports whether the hub is done with a request in phase p.
func (p LogRequestPhase) IsFinal() bool {
	return p == LogRequestAnswered || p == LogRequestFailed || p == LogRequestDenied
}

// Requester is who created a LogRequest. The hub's admission policy (see
// hub/tenantview) refuses a LogRequest whose requester is not the user
// creating it, or claims a group that user is not in; the hub authorizes
// the request as this user.
type Requester struct {
	// Username of the creating user.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Username string `json:"username"`
	// Groups of the creating user (a subset of them is fine: fewer groups
	// can only allow less).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=512
	Groups []string `json:"groups,omitempty"`
}

// LogRequestSpec asks for the end of one replica's output of a TrainJob in
// the LogRequest's namespace.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable"
type LogRequestSpec struct {
	// TrainJobName names a TrainJob in the LogRequest's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	TrainJobName string `json:"trainJobName"`
	// Replica is "<replicatedJob>-<jobIndex>-<podIndex>" (default: rank 0).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Replica string `json:"replica,omitempty"`
	// TailLines keeps the last lines only (0: all that fit LimitBytes).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000
	TailLines int64 `json:"tailLines,omitempty"`
	// LimitBytes bounds the answer (0: MaxLogsBytes).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=524288
	LimitBytes int64 `json:"limitBytes,omitempty"`
	// Requester is the creating user, checked at admission.
	// +required
	Requester Requester `json:"requester"`
}

// LogRequestStatus is the hub's answer.
type LogRequestStatus struct {
	// Phase is where the request stands.
	// +optional
	Phase LogRequestPhase `json:"phase,omitempty"`
	// Message explains a Failed or Denied request.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
	// Target is the target the job runs on.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Target string `json:"target,omitempty"`
	// Source says where the agent read the output.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Source string `json:"source,omitempty"`
	// Truncated is true when older output was cut.
	// +optional
	Truncated bool `json:"truncated,omitempty"`
	// Log is the output, at most MaxLogsBytes.
	// +optional
	// +kubebuilder:validation:MaxLength=524288
	Log string `json:"log,omitempty"`
	// RelayedAt is when the hub handed the request to the agent.
	// +optional
	RelayedAt *metav1.Time `json:"relayedAt,omitempty"`
	// CompletionTime is when the request became final; the hub deletes it
	// LogRequestTTL later.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
}

// LogRequest is a tenant's request for a TrainJob's output.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=lreq
// +kubebuilder:printcolumn:name="TrainJob",type=string,JSONPath=`.spec.trainJobName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type LogRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec LogRequestSpec `json:"spec"`
	// +optional
	Status LogRequestStatus `json:"status,omitempty"`
}

// LogRequestList lists LogRequests.
// +kubebuilder:object:root=true
type LogRequestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []LogRequest `json:"items"`
}

func init() {
	SchemeBuilder.Register(&LogRequest{}, &LogRequestList{})
}

// AnnotationPlacement on a hub TrainJob is the hub's PlacementSummary of its
// live Dispatch as JSON: what its owner may know of where it runs without
// reading Dispatches, which only administrators may.
const AnnotationPlacement = "trainyard.dev/placement"

// MaxSummaryDomains bounds the domains a PlacementSummary lists per pod set.
const MaxSummaryDomains = 64

// PlacementSummary is the tenant's view of a live Dispatch.
// +kubebuilder:object:generate=false
type PlacementSummary struct {
	Target  string        `json:"target"`
	Attempt int32         `json:"attempt"`
	Phase   DispatchPhase `json:"phase,omitempty"`
	Reason  string        `json:"reason,omitempty"`
	// Remote is the remote work as "Kind namespace/name (id ID)".
	Remote  string          `json:"remote,omitempty"`
	PodSets []PodSetSummary `json:"podSets,omitempty"`
	Started *metav1.Time    `json:"started,omitempty"`
	Ended   *metav1.Time    `json:"ended,omitempty"`
	Exit    *int32          `json:"exitCode,omitempty"`
}

// PodSetSummary is one pod set's size and topology domains.
// +kubebuilder:object:generate=false
type PodSetSummary struct {
	Name  string `json:"name"`
	Count int32  `json:"count"`
	// Domains are "value/value=count", widest level first, at most
	// MaxSummaryDomains; MoreDomains counts those left out.
	Domains     []string `json:"domains,omitempty"`
	MoreDomains int      `json:"moreDomains,omitempty"`
}

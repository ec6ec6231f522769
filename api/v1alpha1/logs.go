package v1alpha1

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// `trainyard logs` reaches a job's output through its agent, so users never
// need spoke or Slurm credentials, nor access to the agent namespaces: the
// user creates a LogRequest in the job's namespace, the hub authorizes it
// and writes the request into an annotation of the live Dispatch, the agent
// answers in a ConfigMap of the Dispatch's namespace, owned by the Dispatch,
// and the hub copies the answer into the LogRequest's status.
const (
	// AnnotationLogsRequest on a Dispatch holds a LogsRequest as JSON.
	AnnotationLogsRequest = "trainyard.dev/logs-request"

	// AnnotationLogsRequestID on the answer is the ID of the request it answers.
	AnnotationLogsRequestID = "trainyard.dev/logs-request-id"
	// AnnotationLogsSource on the answer says where the output was read.
	AnnotationLogsSource = "trainyard.dev/logs-source"
	// AnnotationLogsError on the answer explains why no output could be read.
	AnnotationLogsError = "trainyard.dev/logs-error"
	// AnnotationLogsTruncated is "true" when older output was cut.
	AnnotationLogsTruncated = "trainyard.dev/logs-truncated"
	// LogsDataKey is the answer's data key holding the output.
	LogsDataKey = "log"

	// MaxLogsBytes bounds an answer, well inside a ConfigMap's 1 MiB.
	MaxLogsBytes = 512 * 1024
)

// LogsRequest asks an agent for the end of one replica's output.
// +kubebuilder:object:generate=false
type LogsRequest struct {
	// ID is chosen by the requester; the answer carries it back.
	ID string `json:"id"`
	// LogRequest is the namespace/name of the LogRequest relayed, for the
	// agent's log.
	LogRequest string `json:"logRequest,omitempty"`
	// Deadline is when the hub stops waiting for the answer; another
	// request may take this one's place after it.
	Deadline *metav1.Time `json:"deadline,omitempty"`
	// Replica is "<replicatedJob>-<jobIndex>-<podIndex>" (default: rank 0).
	Replica string `json:"replica,omitempty"`
	// TailLines keeps the last lines only (0: all that fit LimitBytes).
	TailLines int64 `json:"tailLines,omitempty"`
	// LimitBytes bounds the answer (0 or more than MaxLogsBytes: MaxLogsBytes).
	LimitBytes int64 `json:"limitBytes,omitempty"`
}

// LogsAnswerName is the name of the ConfigMap answering logs requests of a
// Dispatch. Dispatch names are short (see the hub's naming), so the result
// stays a valid object name.
func LogsAnswerName(dispatch string) string { return fmt.Sprintf("%s-logs", dispatch) }

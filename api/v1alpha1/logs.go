package v1alpha1

import "fmt"

// `trainyard logs` reaches a job's output through its agent, so users never
// need spoke or Slurm credentials: the CLI writes a request into an
// annotation of the live Dispatch, and the agent answers in a ConfigMap of
// the Dispatch's namespace, owned by the Dispatch.
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

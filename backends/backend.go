package backends

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// Backend runs Dispatches on one execution system. Every method is safe to
// call again after a crash at any point: Submit adopts remote work it
// created before, Cancel of work already gone reports it gone.
type Backend interface {
	// Submit creates the remote work for d unless it exists, and returns its
	// reference. An error wrapping ErrRejected means the system refuses this
	// job for good (retrying the same Dispatch cannot help).
	Submit(ctx context.Context, d *v1alpha1.Dispatch) (*v1alpha1.RemoteRef, error)
	// Observe reports the remote work's state; ErrNotFound when none exists.
	Observe(ctx context.Context, d *v1alpha1.Dispatch) (*Status, error)
	// Cancel stops and deletes the remote work of d. It returns gone=true
	// only once every process of it has ended (pods deleted and
	// terminated, the Slurm job in a final state), so the caller can
	// release the Dispatch and the hub may start another copy.
	Cancel(ctx context.Context, d *v1alpha1.Dispatch) (gone bool, err error)
	// Capacity reports what the system has and what is free, per topology domain.
	Capacity(ctx context.Context) (*Capacity, error)
}

// RemoteLister is implemented by backends that can list the remote work
// they made, so the agent can delete work whose Dispatch no longer exists
// (stale work of a fenced attempt, or of a job deleted while the agent was away).
type RemoteLister interface {
	ListRemote(ctx context.Context) ([]RemoteWork, error)
	// Delete removes one piece of remote work found by ListRemote.
	Delete(ctx context.Context, w RemoteWork) error
}

// RemoteWork is remote work tagged with the Dispatch that made it.
type RemoteWork struct {
	Ref               v1alpha1.RemoteRef
	DispatchNamespace string
	DispatchName      string
	Attempt           int32
	// Finished: the work has ended (succeeded or failed) and none of its
	// processes runs. A lease fence never stops finished work.
	Finished bool
}

// StopBound is implemented by backends that know how long the processes of
// their work may live on after a Cancel or Delete (pods' termination grace,
// Slurm's KillWait). The agent advertises it on its Lease, and the hub
// waits that much longer before it requeues the jobs of a target whose
// agent went silent, so the requeued copy never overlaps the old one.
type StopBound interface {
	StopWithin() time.Duration
}

// StopMargin is what a StopBound adds to the processes' own time to stop
// (pods' termination grace, Slurm's KillWait): the time for the stop to
// reach them, a delete passing the API server and the garbage collector,
// or a cancel passing slurmctld to the nodes.
const StopMargin = 15 * time.Second

// Status is the state of remote work as the backend sees it.
type Status struct {
	Phase          v1alpha1.DispatchPhase
	Reason         string
	Message        string
	Replicas       []v1alpha1.ReplicaStatus
	ExitCode       *int32
	StartTime      *metav1.Time
	CompletionTime *metav1.Time
	// UserID is the Unix user the work runs as, where the backend has one
	// (a Slurm job); the agent records it in status.remote.userID.
	UserID *int64
}

// Capacity is a system's resources and topology.
type Capacity struct {
	Capacity corev1.ResourceList
	Free     corev1.ResourceList
	Topology *v1alpha1.TopologyStatus
	// MaxGPUsPerNode is the largest node's allocatable GPUs (0: unknown).
	MaxGPUsPerNode int64
}

var (
	// ErrNotFound: no remote work exists for the Dispatch.
	ErrNotFound = errors.New("remote work not found")
	// ErrRejected: the system refuses the job permanently.
	ErrRejected = errors.New("rejected by backend")
)

// Labels and annotations remote work carries, beside
// v1alpha1.LabelDispatchNamespace and LabelDispatchName, so the agent can
// find the Dispatch that made it. A Target name may be longer than a label
// value and is carried as v1alpha1.LabelValue.
const (
	LabelWorkloadUID = v1alpha1.LabelWorkloadUID
	LabelTrainJobUID = v1alpha1.LabelTrainJobUID
	LabelAttempt     = v1alpha1.LabelAttempt
	LabelTarget      = v1alpha1.LabelTarget
	LabelManagedBy   = "app.kubernetes.io/managed-by"
	ManagedByValue   = "trainyard"
)

// Bounds of remote names. JobSet names a pod
// <jobset>-<replicatedJob>-<jobIndex>-<podIndex>-<5 random characters>, and
// its webhook refuses a JobSet whose longest pod name would pass 63
// characters. Trainer caps replicated-job names at MaxReplicatedJobName
// (v2.4; the longest it ships, dataset-initializer, has 19). With one-digit
// job indexes and pod indexes of up to four digits (10,000 pods per job),
// 63 - 20 - 1 - 4 - 6 - 3 dashes leaves MaxRemoteName. A LeaderWorkerSet
// name must be a DNS-1035 label and its StatefulSets and pods append
// "-<group>[-<worker>]", which fits as well.
const (
	MaxReplicatedJobName = 20
	MaxRemoteName        = 29
	remoteIDLen          = 10
)

// RemoteName is the name remote work of d gets: derived from the Workload
// UID and attempt only, so a retried create finds the same name and never
// makes a second job. The TrainJob name is kept in front, shortened, for
// people reading the spoke; the result is a DNS-1035 label of at most
// MaxRemoteName bytes. Once the agent has recorded the name of the work it
// made in d's status, that name is the answer, so work made under an
// earlier naming rule is still found after an upgrade.
func RemoteName(d *v1alpha1.Dispatch) string {
	if r := d.Status.Remote; r != nil && r.Name != "" {
		return r.Name
	}
	sum := sha256.Sum256([]byte(string(d.Spec.Workload.UID)))
	suffix := "-" + hex.EncodeToString(sum[:])[:remoteIDLen] + "-a" + strconv.Itoa(int(d.Spec.Attempt))
	return dns1035Prefix(d.Spec.TrainJob.Name, MaxRemoteName-len(suffix)) + suffix
}

// dns1035Prefix is the start of name, at most max bytes, made into the
// beginning of a DNS-1035 label: lower case letters, digits and inner
// dashes, starting with a letter ("job" when nothing of name is left).
func dns1035Prefix(name string, max int) string {
	b := make([]byte, 0, max)
	for _, c := range []byte(strings.ToLower(name)) {
		switch {
		case len(b) == max:
		case c >= 'a' && c <= 'z', len(b) > 0 && (c >= '0' && c <= '9' || c == '-'):
			b = append(b, c)
		case len(b) > 0 && c == '.':
			b = append(b, '-')
		}
	}
	out := strings.TrimRight(string(b), "-")
	if out == "" {
		return "job"
	}
	return out
}

// RemoteLabels are the labels every piece of remote work of d carries.
func RemoteLabels(d *v1alpha1.Dispatch) map[string]string {
	return map[string]string{
		v1alpha1.LabelDispatchNamespace: d.Namespace,
		v1alpha1.LabelDispatchName:      d.Name,
		LabelWorkloadUID:                string(d.Spec.Workload.UID),
		LabelTrainJobUID:                string(d.Spec.TrainJob.UID),
		LabelAttempt:                    strconv.Itoa(int(d.Spec.Attempt)),
		LabelTarget:                     v1alpha1.LabelValue(d.Spec.TargetName),
		LabelManagedBy:                  ManagedByValue,
	}
}

// LogReader is implemented by backends that can read a job's output, so the
// agent can answer `trainyard logs` without giving users spoke credentials.
type LogReader interface {
	// Logs returns the end of the output of one replica of d's remote work.
	Logs(ctx context.Context, d *v1alpha1.Dispatch, o LogOptions) (*Logs, error)
}

// LogOptions choose what Logs returns.
type LogOptions struct {
	// Replica names one pod or task ("<replicatedJob>-<jobIndex>-<podIndex>",
	// e.g. node-0-1); empty means the first (rank 0).
	Replica string
	// TailLines keeps only the last lines (0: all that fit LimitBytes).
	TailLines int64
	// LimitBytes bounds the bytes returned, keeping the end.
	LimitBytes int64
}

// Logs is output read from remote work.
type Logs struct {
	// Source says where the output was read from, for the user.
	Source string
	Data   []byte
	// Truncated is set when older output was cut to fit LimitBytes.
	Truncated bool
}

// TailOf keeps the last lines of data (all when lines is 0) and then at most
// limit bytes (no limit when 0), starting at a line boundary when it cuts.
func TailOf(data []byte, lines, limit int64) (out []byte, truncated bool) {
	if lines > 0 {
		end := len(data)
		if end > 0 && data[end-1] == '\n' {
			end-- // a final newline does not start another line
		}
		n := int64(0)
		for i := end - 1; i >= 0; i-- {
			if data[i] == '\n' {
				n++
				if n == lines {
					data, truncated = data[i+1:], true
					break
				}
			}
		}
	}
	if limit > 0 && int64(len(data)) > limit {
		data, truncated = data[int64(len(data))-limit:], true
		if i := bytes.IndexByte(data, '\n'); i >= 0 && i+1 < len(data) {
			data = data[i+1:]
		}
	}
	return data, truncated
}

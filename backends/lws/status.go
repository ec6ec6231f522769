package lws

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	lwsv1 "sigs.k8s.io/lws/api/leaderworkerset/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/backends/kubework"
)

// finished is how a LeaderWorkerSet's job ended, as JSON in its
// v1alpha1.AnnotationLeaderWorkerSetFinished annotation.
type finished struct {
	Phase    v1alpha1.DispatchPhase `json:"phase"`
	Reason   string                 `json:"reason"`
	Message  string                 `json:"message,omitempty"`
	ExitCode *int32                 `json:"exitCode,omitempty"`
	Start    *metav1.Time           `json:"start,omitempty"`
	At       metav1.Time            `json:"at"`
}

// Observe maps d's LeaderWorkerSet and its pods to a status. The first
// time it sees the job end it records the end and scales the set to zero.
func (b *Backend) Observe(ctx context.Context, d *v1alpha1.Dispatch) (*backends.Status, error) {
	lws, err := b.owned(ctx, d)
	if err != nil {
		return nil, err
	}
	if raw, ok := lws.Annotations[v1alpha1.AnnotationLeaderWorkerSetFinished]; ok {
		var f finished
		if err := json.Unmarshal([]byte(raw), &f); err != nil {
			return nil, fmt.Errorf("leaderworkerset %s/%s: annotation %s: %w", lws.Namespace, lws.Name, v1alpha1.AnnotationLeaderWorkerSetFinished, err)
		}
		return &backends.Status{Phase: f.Phase, Reason: f.Reason, Message: f.Message, ExitCode: f.ExitCode,
			StartTime: f.Start, CompletionTime: &f.At}, nil
	}
	pods, err := b.pods(ctx, client.ObjectKeyFromObject(lws))
	if err != nil {
		return nil, err
	}
	st := groupStatus(lws, pods, metav1.NewTime(b.opts.Clock.Now()))
	if st.Phase.IsFinal() && lws.DeletionTimestamp == nil {
		if err := b.finish(ctx, lws, st); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// finish writes the end into the LeaderWorkerSet and scales it to zero, in
// one patch guarded by its resourceVersion: a later Observe reads the
// record, never a restarted container.
func (b *Backend) finish(ctx context.Context, lws *lwsv1.LeaderWorkerSet, st *backends.Status) error {
	raw, err := json.Marshal(finished{Phase: st.Phase, Reason: st.Reason, Message: st.Message, ExitCode: st.ExitCode,
		Start: st.StartTime, At: *st.CompletionTime})
	if err != nil {
		return err
	}
	patch := client.MergeFromWithOptions(lws.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if lws.Annotations == nil {
		lws.Annotations = map[string]string{}
	}
	lws.Annotations[v1alpha1.AnnotationLeaderWorkerSetFinished] = string(raw)
	zero := int32(0)
	lws.Spec.Replicas = &zero
	if err := b.c.Patch(ctx, lws, patch); err != nil {
		return fmt.Errorf("record the end of leaderworkerset %s/%s: %w", lws.Namespace, lws.Name, err)
	}
	return nil
}

// groupStatus is the mapping, free of clients for tests. A trainer
// container that exited non-zero in any pod fails the job; the leader's
// exiting zero completes it (for MPI, the launcher's mpirun; for torch,
// rank 0, whose exit follows the other ranks').
func groupStatus(lws *lwsv1.LeaderWorkerSet, pods []corev1.Pod, now metav1.Time) *backends.Status {
	size := ptr.Deref(lws.Spec.LeaderWorkerTemplate.Size, 1)
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	st := &backends.Status{StartTime: kubework.EarliestStart(pods)}
	var ready, running int32
	var leaderExit *int32
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		container := trainerContainer(&p.Spec)
		if code, ok := exitCode(p, container); ok {
			if code != 0 && st.ExitCode == nil {
				st.ExitCode = &code
				st.Message = fmt.Sprintf("pod %s container %s exited with code %d", p.Name, container, code)
			}
			if p.Labels[lwsv1.WorkerIndexLabelKey] == "0" {
				leaderExit = &code
			}
		}
		if p.Status.Phase == corev1.PodRunning {
			running++
			if podReady(p) {
				ready++
			}
		}
	}
	st.Replicas = []v1alpha1.ReplicaStatus{{Name: lws.Name, Active: running, Ready: ready}}
	switch {
	case st.ExitCode != nil:
		st.Phase, st.Reason, st.CompletionTime = v1alpha1.DispatchFailed, v1alpha1.ReasonContainerFailed, &now
	case leaderExit != nil:
		st.Phase, st.Reason, st.CompletionTime = v1alpha1.DispatchSucceeded, v1alpha1.ReasonLeaderSucceeded, &now
		st.Message = "the leader's trainer container exited with code 0"
	case lws.DeletionTimestamp != nil:
		st.Phase, st.Reason, st.Message = v1alpha1.DispatchCancelled, v1alpha1.ReasonLeaderWorkerSetDeleted, "the LeaderWorkerSet is being deleted"
		st.CompletionTime = &now
	case ready >= size:
		st.Phase, st.Reason = v1alpha1.DispatchRunning, v1alpha1.ReasonAllPodsReady
		if st.StartTime == nil {
			st.StartTime = &now
		}
	default:
		st.Phase, st.Reason, st.StartTime = v1alpha1.DispatchSubmitted, v1alpha1.ReasonLeaderWorkerSetCreated, nil
	}
	return st
}

// exitCode is the exit code of container's last run in p: its current
// state if it is terminated, else the run before its restart.
func exitCode(p *corev1.Pod, container string) (int32, bool) {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != container {
			continue
		}
		if t := cs.State.Terminated; t != nil {
			return t.ExitCode, true
		}
		if t := cs.LastTerminationState.Terminated; t != nil {
			return t.ExitCode, true
		}
	}
	return 0, false
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Logs reads the trainer container of one pod of the group: replica ""
// or "0" is the leader, "<i>" the worker of index i (LWS's worker index,
// the node rank of a torch job), or the pod's name.
func (b *Backend) Logs(ctx context.Context, d *v1alpha1.Dispatch, o backends.LogOptions) (*backends.Logs, error) {
	if b.opts.Logs == nil {
		return nil, errors.New("logs are not configured: this backend has no clientset to read pod logs with")
	}
	lws, err := b.owned(ctx, d)
	if err != nil {
		return nil, err
	}
	pods, err := b.pods(ctx, client.ObjectKeyFromObject(lws))
	if err != nil {
		return nil, err
	}
	want := o.Replica
	if want == "" {
		want = "0"
	}
	var names []string
	for i := range pods {
		p := &pods[i]
		idx := p.Labels[lwsv1.WorkerIndexLabelKey]
		names = append(names, idx)
		if idx == want || p.Name == want {
			return kubework.ReadContainerLogs(ctx, b.opts.Logs, p, trainerContainer(&p.Spec), o)
		}
	}
	if len(pods) == 0 {
		return nil, fmt.Errorf("leaderworkerset %s/%s: %w: no pods (it has finished, or not started yet)", lws.Namespace, lws.Name, backends.ErrNotFound)
	}
	slices.Sort(names)
	return nil, fmt.Errorf("leaderworkerset %s/%s: no replica %q; worker indexes: %s", lws.Namespace, lws.Name, want, strings.Join(names, ", "))
}

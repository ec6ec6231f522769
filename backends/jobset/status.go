package jobset

import (
	"context"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/backends/kubework"
)

// ownedJobSet gets d's JobSet (see kubework.GetOwned).
func (b *Backend) ownedJobSet(ctx context.Context, d *v1alpha1.Dispatch) (*jobsetv1alpha2.JobSet, error) {
	js := &jobsetv1alpha2.JobSet{}
	if err := kubework.GetOwned(ctx, b.c, b.opts.LiveReader, kubework.NamespaceOf(b.opts.Namespace, d), d, js, Kind); err != nil {
		return nil, err
	}
	return js, nil
}

// Observe maps d's JobSet, and its pods where they tell more (start time,
// exit code), to a backend status.
func (b *Backend) Observe(ctx context.Context, d *v1alpha1.Dispatch) (*backends.Status, error) {
	js, err := b.ownedJobSet(ctx, d)
	if err != nil {
		return nil, err
	}
	var pods []corev1.Pod
	if needsPods(js) {
		if pods, err = b.pods(ctx, client.ObjectKeyFromObject(js)); err != nil {
			return nil, err
		}
	}
	return jobSetStatus(js, pods, b.opts.Clock.Now()), nil
}

// needsPods: pods are only read once something has run.
func needsPods(js *jobsetv1alpha2.JobSet) bool {
	return finishedCondition(js) != nil || anyActive(js)
}

// jobSetStatus is the mapping itself, kept free of clients for tests.
func jobSetStatus(js *jobsetv1alpha2.JobSet, pods []corev1.Pod, now time.Time) *backends.Status {
	st := &backends.Status{Replicas: replicas(js)}
	cond := finishedCondition(js)
	switch {
	case cond != nil && cond.Type == string(jobsetv1alpha2.JobSetCompleted):
		st.Phase, st.Reason, st.Message = v1alpha1.DispatchSucceeded, reasonOr(cond, v1alpha1.ReasonJobSetCompleted), cond.Message
		st.CompletionTime = ptrTime(cond.LastTransitionTime)
		st.StartTime = kubework.EarliestStart(pods)
	case cond != nil:
		st.Phase, st.Reason, st.Message = v1alpha1.DispatchFailed, reasonOr(cond, v1alpha1.ReasonJobSetFailed), cond.Message
		st.CompletionTime = ptrTime(cond.LastTransitionTime)
		st.StartTime = kubework.EarliestStart(pods)
		st.ExitCode = failedExitCode(pods)
	case js.DeletionTimestamp != nil:
		// Deleted before it finished: by our Cancel, or by someone on the spoke.
		st.Phase, st.Reason = v1alpha1.DispatchCancelled, v1alpha1.ReasonJobSetDeleted
		st.Message = "the JobSet is being deleted"
	case allReady(js):
		st.Phase, st.Reason = v1alpha1.DispatchRunning, v1alpha1.ReasonPodsRunning
		if st.StartTime = kubework.EarliestStart(pods); st.StartTime == nil {
			st.StartTime = &metav1.Time{Time: now}
		}
	default:
		st.Phase, st.Reason = v1alpha1.DispatchSubmitted, v1alpha1.ReasonJobSetCreated
	}
	return st
}

// finishedCondition is the JobSet's true Completed or Failed condition.
func finishedCondition(js *jobsetv1alpha2.JobSet) *metav1.Condition {
	for _, t := range []jobsetv1alpha2.JobSetConditionType{jobsetv1alpha2.JobSetCompleted, jobsetv1alpha2.JobSetFailed} {
		if c := apimeta.FindStatusCondition(js.Status.Conditions, string(t)); c != nil && c.Status == metav1.ConditionTrue {
			return c
		}
	}
	return nil
}

func anyActive(js *jobsetv1alpha2.JobSet) bool {
	for _, r := range js.Status.ReplicatedJobsStatus {
		if r.Active > 0 || r.Ready > 0 {
			return true
		}
	}
	return false
}

// allReady: every replicated job has all its Jobs ready, that is every pod
// running. Active alone is not running: a Job with pods still Pending is
// active, and calling it running would let placement book its GPUs twice.
func allReady(js *jobsetv1alpha2.JobSet) bool {
	if len(js.Status.ReplicatedJobsStatus) < max(len(js.Spec.ReplicatedJobs), 1) {
		return false
	}
	want := map[string]int32{}
	for _, rj := range js.Spec.ReplicatedJobs {
		want[rj.Name] = rj.Replicas
	}
	for _, r := range js.Status.ReplicatedJobsStatus {
		if r.Ready+r.Succeeded < max(want[r.Name], 1) {
			return false
		}
	}
	return true
}

// replicas copies the JobSet's counts. They count child Jobs, not pods:
// Trainer renders one Job per replicated job with numNodes pods, so a
// replica is the whole pod set.
func replicas(js *jobsetv1alpha2.JobSet) []v1alpha1.ReplicaStatus {
	if len(js.Status.ReplicatedJobsStatus) == 0 {
		return nil
	}
	out := make([]v1alpha1.ReplicaStatus, 0, len(js.Status.ReplicatedJobsStatus))
	for _, r := range js.Status.ReplicatedJobsStatus {
		out = append(out, v1alpha1.ReplicaStatus{Name: r.Name, Active: r.Active, Ready: r.Ready, Succeeded: r.Succeeded, Failed: r.Failed})
	}
	return out
}

func reasonOr(c *metav1.Condition, fallback string) string {
	if c.Reason != "" {
		return c.Reason
	}
	return fallback
}

func ptrTime(t metav1.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// failedExitCode is the non-zero exit code of the first container that
// failed, by finish time, among the pods; nil when none reports one.
func failedExitCode(pods []corev1.Pod) *int32 {
	type exit struct {
		at   time.Time
		code int32
	}
	var exits []exit
	for _, p := range pods {
		for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
			if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
				exits = append(exits, exit{at: t.FinishedAt.Time, code: t.ExitCode})
			}
		}
	}
	if len(exits) == 0 {
		return nil
	}
	sort.SliceStable(exits, func(i, j int) bool { return exits[i].at.Before(exits[j].at) })
	return &exits[0].code
}

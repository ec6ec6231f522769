package jobset

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
)

var (
	t0  = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now = t0.Add(time.Hour)
)

func at(minutes int) metav1.Time { return metav1.NewTime(t0.Add(time.Duration(minutes) * time.Minute)) }

func atPtr(minutes int) *metav1.Time { t := at(minutes); return &t }

func jobSetWith(conds []metav1.Condition, rjs ...jobsetv1alpha2.ReplicatedJobStatus) *jobsetv1alpha2.JobSet {
	return &jobsetv1alpha2.JobSet{
		ObjectMeta: metav1.ObjectMeta{Name: "js", Namespace: testNS},
		Status:     jobsetv1alpha2.JobSetStatus{Conditions: conds, ReplicatedJobsStatus: rjs},
	}
}

func cond(t jobsetv1alpha2.JobSetConditionType, s metav1.ConditionStatus, reason, msg string, minutes int) metav1.Condition {
	return metav1.Condition{Type: string(t), Status: s, Reason: reason, Message: msg, LastTransitionTime: at(minutes)}
}

// pod started at start minutes; exit codes, if any, are its containers'
// terminations at finish minutes.
func pod(start, finish int, exits ...int32) corev1.Pod {
	p := corev1.Pod{Status: corev1.PodStatus{StartTime: atPtr(start)}}
	for _, code := range exits {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, FinishedAt: at(finish)}},
		})
	}
	return p
}

func TestJobSetStatus(t *testing.T) {
	active := jobsetv1alpha2.ReplicatedJobStatus{Name: "node", Active: 1}
	running := jobsetv1alpha2.ReplicatedJobStatus{Name: "node", Active: 1, Ready: 1}
	done := jobsetv1alpha2.ReplicatedJobStatus{Name: "node", Succeeded: 1}
	failed := jobsetv1alpha2.ReplicatedJobStatus{Name: "node", Failed: 1}
	deleting := jobSetWith(nil, active)
	deleting.DeletionTimestamp = atPtr(30)
	cases := map[string]struct {
		js   *jobsetv1alpha2.JobSet
		pods []corev1.Pod
		want backends.Status
	}{
		"just created": {
			js:   jobSetWith(nil),
			want: backends.Status{Phase: v1alpha1.DispatchSubmitted, Reason: v1alpha1.ReasonJobSetCreated},
		},
		"jobs exist, no pod active yet": {
			js: jobSetWith(nil, jobsetv1alpha2.ReplicatedJobStatus{Name: "node"}),
			want: backends.Status{Phase: v1alpha1.DispatchSubmitted, Reason: v1alpha1.ReasonJobSetCreated,
				Replicas: []v1alpha1.ReplicaStatus{{Name: "node"}}},
		},
		"active but pods not all running is only submitted": {
			js: jobSetWith(nil, active, jobsetv1alpha2.ReplicatedJobStatus{Name: "launcher", Ready: 1, Active: 1}),
			want: backends.Status{Phase: v1alpha1.DispatchSubmitted, Reason: v1alpha1.ReasonJobSetCreated,
				Replicas: []v1alpha1.ReplicaStatus{{Name: "node", Active: 1}, {Name: "launcher", Active: 1, Ready: 1}}},
		},
		"running, start from the earliest pod": {
			js:   jobSetWith(nil, running, jobsetv1alpha2.ReplicatedJobStatus{Name: "launcher", Ready: 1, Active: 1}),
			pods: []corev1.Pod{pod(5, 0), pod(2, 0), {}},
			want: backends.Status{Phase: v1alpha1.DispatchRunning, Reason: v1alpha1.ReasonPodsRunning, StartTime: atPtr(2),
				Replicas: []v1alpha1.ReplicaStatus{{Name: "node", Active: 1, Ready: 1}, {Name: "launcher", Active: 1, Ready: 1}}},
		},
		"running, no pod reports a start": {
			js: jobSetWith(nil, jobsetv1alpha2.ReplicatedJobStatus{Name: "node", Ready: 1}),
			want: backends.Status{Phase: v1alpha1.DispatchRunning, Reason: v1alpha1.ReasonPodsRunning, StartTime: &metav1.Time{Time: now},
				Replicas: []v1alpha1.ReplicaStatus{{Name: "node", Ready: 1}}},
		},
		"a false Completed condition is not the end": {
			js:   jobSetWith([]metav1.Condition{cond(jobsetv1alpha2.JobSetCompleted, metav1.ConditionFalse, "", "", 3)}, running),
			pods: []corev1.Pod{pod(1, 0)},
			want: backends.Status{Phase: v1alpha1.DispatchRunning, Reason: v1alpha1.ReasonPodsRunning, StartTime: atPtr(1),
				Replicas: []v1alpha1.ReplicaStatus{{Name: "node", Active: 1, Ready: 1}}},
		},
		"completed": {
			js:   jobSetWith([]metav1.Condition{cond(jobsetv1alpha2.JobSetCompleted, metav1.ConditionTrue, "AllJobsCompleted", "jobset completed successfully", 9)}, done),
			pods: []corev1.Pod{pod(1, 8, 0)},
			want: backends.Status{Phase: v1alpha1.DispatchSucceeded, Reason: "AllJobsCompleted", Message: "jobset completed successfully",
				StartTime: atPtr(1), CompletionTime: atPtr(9), Replicas: []v1alpha1.ReplicaStatus{{Name: "node", Succeeded: 1}}},
		},
		"failed, first failed container's exit code": {
			js:   jobSetWith([]metav1.Condition{cond(jobsetv1alpha2.JobSetFailed, metav1.ConditionTrue, "FailedJobs", "jobset failed due to one or more job failures", 9)}, failed),
			pods: []corev1.Pod{pod(1, 6, 0, 137), pod(1, 4, 3), pod(1, 2, 0)},
			want: backends.Status{Phase: v1alpha1.DispatchFailed, Reason: "FailedJobs", Message: "jobset failed due to one or more job failures",
				ExitCode: ptr.To[int32](3), StartTime: atPtr(1), CompletionTime: atPtr(9),
				Replicas: []v1alpha1.ReplicaStatus{{Name: "node", Failed: 1}}},
		},
		"failed, pods already gone": {
			js:   jobSetWith([]metav1.Condition{cond(jobsetv1alpha2.JobSetFailed, metav1.ConditionTrue, "", "", 9)}),
			want: backends.Status{Phase: v1alpha1.DispatchFailed, Reason: v1alpha1.ReasonJobSetFailed, CompletionTime: atPtr(9)},
		},
		"deleted before finishing": {
			js: deleting,
			want: backends.Status{Phase: v1alpha1.DispatchCancelled, Reason: v1alpha1.ReasonJobSetDeleted, Message: "the JobSet is being deleted",
				Replicas: []v1alpha1.ReplicaStatus{{Name: "node", Active: 1}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := jobSetStatus(tc.js, tc.pods, now)
			if diff := cmp.Diff(tc.want, *got); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}

// TestJobSetStatusWithInitializers: the trainer's nodes start only once the
// initializer jobs complete (dependsOn), so the job is running only when
// the nodes are, and done only when the JobSet says so, not when the
// initializers finish.
func TestJobSetStatusWithInitializers(t *testing.T) {
	spec := func(js *jobsetv1alpha2.JobSet) *jobsetv1alpha2.JobSet {
		for _, n := range []string{"dataset-initializer", "model-initializer", "node"} {
			js.Spec.ReplicatedJobs = append(js.Spec.ReplicatedJobs, jobsetv1alpha2.ReplicatedJob{Name: n, Replicas: 1})
		}
		return js
	}
	rjs := func(dataset, model, node jobsetv1alpha2.ReplicatedJobStatus) []jobsetv1alpha2.ReplicatedJobStatus {
		dataset.Name, model.Name, node.Name = "dataset-initializer", "model-initializer", "node"
		return []jobsetv1alpha2.ReplicatedJobStatus{dataset, model, node}
	}
	replicas := func(s []jobsetv1alpha2.ReplicatedJobStatus) []v1alpha1.ReplicaStatus {
		js := jobSetWith(nil, s...)
		return replicas(js)
	}
	var none jobsetv1alpha2.ReplicatedJobStatus
	running := jobsetv1alpha2.ReplicatedJobStatus{Active: 1, Ready: 1}
	done := jobsetv1alpha2.ReplicatedJobStatus{Succeeded: 1}
	failed := jobsetv1alpha2.ReplicatedJobStatus{Failed: 1}
	cases := map[string]struct {
		status []jobsetv1alpha2.ReplicatedJobStatus
		conds  []metav1.Condition
		pods   []corev1.Pod
		want   backends.Status
	}{
		"initializers running, nodes not made yet": {
			status: rjs(running, running, none),
			pods:   []corev1.Pod{pod(1, 0), pod(2, 0)},
			want:   backends.Status{Phase: v1alpha1.DispatchSubmitted, Reason: v1alpha1.ReasonJobSetCreated},
		},
		"one initializer done, the other running": {
			status: rjs(done, running, none),
			pods:   []corev1.Pod{pod(1, 3, 0), pod(2, 0)},
			want:   backends.Status{Phase: v1alpha1.DispatchSubmitted, Reason: v1alpha1.ReasonJobSetCreated},
		},
		"initializers done, nodes running": {
			status: rjs(done, done, running),
			pods:   []corev1.Pod{pod(1, 3, 0), pod(2, 4, 0), pod(5, 0)},
			want:   backends.Status{Phase: v1alpha1.DispatchRunning, Reason: v1alpha1.ReasonPodsRunning, StartTime: atPtr(1)},
		},
		"initializers done, no node active yet": {
			status: rjs(done, done, none),
			pods:   []corev1.Pod{pod(1, 3, 0), pod(2, 4, 0)},
			want:   backends.Status{Phase: v1alpha1.DispatchSubmitted, Reason: v1alpha1.ReasonJobSetCreated},
		},
		"nodes completed": {
			status: rjs(done, done, done),
			conds:  []metav1.Condition{cond(jobsetv1alpha2.JobSetCompleted, metav1.ConditionTrue, "AllJobsCompleted", "jobset completed successfully", 9)},
			pods:   []corev1.Pod{pod(1, 3, 0), pod(2, 4, 0), pod(5, 8, 0)},
			want: backends.Status{Phase: v1alpha1.DispatchSucceeded, Reason: "AllJobsCompleted", Message: "jobset completed successfully",
				StartTime: atPtr(1), CompletionTime: atPtr(9)},
		},
		"an initializer failed, nodes never ran": {
			status: rjs(failed, done, none),
			conds:  []metav1.Condition{cond(jobsetv1alpha2.JobSetFailed, metav1.ConditionTrue, "FailedJobs", "jobset failed due to one or more job failures", 4)},
			pods:   []corev1.Pod{pod(1, 3, 2), pod(2, 3, 0)},
			want: backends.Status{Phase: v1alpha1.DispatchFailed, Reason: "FailedJobs", Message: "jobset failed due to one or more job failures",
				ExitCode: ptr.To[int32](2), StartTime: atPtr(1), CompletionTime: atPtr(4)},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tc.want.Replicas = replicas(tc.status)
			got := jobSetStatus(spec(jobSetWith(tc.conds, tc.status...)), tc.pods, now)
			if diff := cmp.Diff(tc.want, *got); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}

package jobset

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	trainerconstants "github.com/kubeflow/trainer/v2/pkg/constants"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/backends/kubework"
)

var _ backends.LogReader = (*Backend)(nil)

// Logs reads the end of the trainer container's output of one pod of d's
// JobSet through the API server (which asks the pod's kubelet). Replica ""
// is rank 0: job 0, completion index 0 of the trainer's replicated job.
func (b *Backend) Logs(ctx context.Context, d *v1alpha1.Dispatch, o backends.LogOptions) (*backends.Logs, error) {
	if b.opts.Logs == nil {
		return nil, errors.New("logs are not configured: this backend has no clientset to read pod logs with")
	}
	js, err := b.ownedJobSet(ctx, d)
	if err != nil {
		return nil, err
	}
	pods, err := b.pods(ctx, client.ObjectKeyFromObject(js))
	if err != nil {
		return nil, err
	}
	rjob, container := trainerOf(js)
	pod, err := pickPod(pods, o.Replica, rjob)
	if err != nil {
		return nil, fmt.Errorf("jobset %s/%s: %w", js.Namespace, js.Name, err)
	}
	return kubework.ReadContainerLogs(ctx, b.opts.Logs, pod, kubework.ContainerNamed(&pod.Spec, container), o)
}

// trainerOf names the replicated job and container that run the trainer:
// the job Trainer labels as its trainer ancestor (else the one named
// "node"), and its container named "node" (else its first).
func trainerOf(js *jobsetv1alpha2.JobSet) (rjob, container string) {
	rjob, container = trainerconstants.Node, trainerconstants.Node
	for _, rj := range js.Spec.ReplicatedJobs {
		if rj.Template.Labels[trainerconstants.LabelTrainJobAncestor] != trainerconstants.AncestorTrainer {
			continue
		}
		rjob = rj.Name
		container = kubework.ContainerNamed(&rj.Template.Spec.Template.Spec, trainerconstants.Node)
		break
	}
	return rjob, container
}

// replicaName is a pod's replica as users name it:
// "<replicatedJob>-<jobIndex>-<completionIndex>".
func replicaName(p *corev1.Pod) string {
	l := p.Labels
	idx, ok := l[batchv1.JobCompletionIndexAnnotation] // a label too since Kubernetes 1.28
	if !ok {
		idx = p.Annotations[batchv1.JobCompletionIndexAnnotation]
	}
	return fmt.Sprintf("%s-%s-%s", l[jobsetv1alpha2.ReplicatedJobNameKey], l[jobsetv1alpha2.JobIndexKey], idx)
}

// pickPod finds the pod of replica (rank 0 of rjob when empty). Of pods
// sharing a replica (a restarted job), a live one is preferred, then the
// newest.
func pickPod(pods []corev1.Pod, replica, rjob string) (*corev1.Pod, error) {
	want := replica
	if want == "" {
		want = rjob + "-0-0"
	}
	var found *corev1.Pod
	names := map[string]bool{}
	for i := range pods {
		p := &pods[i]
		r := replicaName(p)
		names[r] = true
		if r != want {
			continue
		}
		if found == nil || better(p, found) {
			found = p
		}
	}
	if found != nil {
		return found, nil
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: no pods yet", backends.ErrNotFound)
	}
	list := make([]string, 0, len(names))
	for n := range names {
		list = append(list, n)
	}
	slices.Sort(list)
	if replica == "" {
		return nil, fmt.Errorf("%w: no rank-0 pod (%s) yet; replicas: %s", backends.ErrNotFound, want, strings.Join(list, ", "))
	}
	return nil, fmt.Errorf("no replica %q; replicas: %s", replica, strings.Join(list, ", "))
}

func better(p, than *corev1.Pod) bool {
	if pd, td := p.DeletionTimestamp != nil, than.DeletionTimestamp != nil; pd != td {
		return !pd
	}
	return than.CreationTimestamp.Before(&p.CreationTimestamp)
}

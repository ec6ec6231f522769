package jobset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	trainerconstants "github.com/kubeflow/trainer/v2/pkg/constants"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
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
	name := js.Name
	pods, err := b.pods(ctx, name)
	if err != nil {
		return nil, err
	}
	rjob, container := trainerOf(js)
	pod, err := pickPod(pods, o.Replica, rjob)
	if err != nil {
		return nil, fmt.Errorf("jobset %s/%s: %w", b.opts.Namespace, name, err)
	}
	if !slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == container }) &&
		len(pod.Spec.Containers) > 0 {
		container = pod.Spec.Containers[0].Name
	}
	source := fmt.Sprintf("pod %s/%s container %s", pod.Namespace, pod.Name, container)
	if pod.Status.Phase == corev1.PodPending && !started(pod, container) {
		return nil, fmt.Errorf("%w: %s has not started yet (pod pending)", backends.ErrNotFound, source)
	}
	po := &corev1.PodLogOptions{Container: container}
	if o.TailLines > 0 {
		// One more line than asked for tells whether older output exists.
		po.TailLines = ptrTo(o.TailLines + 1)
	}
	// The API server's limitBytes keeps the beginning, and Logs keeps the
	// end: stream instead, holding only the last LimitBytes.
	stream, err := b.opts.Logs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, po).Stream(ctx)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: %s: %w", backends.ErrNotFound, source, err)
	}
	if err != nil {
		return nil, fmt.Errorf("read logs of %s: %w", source, err)
	}
	defer stream.Close()
	data, dropped, err := readTail(stream, o.LimitBytes)
	if err != nil {
		return nil, fmt.Errorf("read logs of %s: %w", source, err)
	}
	out, truncated := backends.TailOf(data, o.TailLines, o.LimitBytes)
	return &backends.Logs{Source: source, Data: out, Truncated: truncated || dropped}, nil
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
		cs := rj.Template.Spec.Template.Spec.Containers
		if !slices.ContainsFunc(cs, func(c corev1.Container) bool { return c.Name == trainerconstants.Node }) && len(cs) > 0 {
			container = cs[0].Name
		}
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

// started reports whether container has run at all.
func started(p *corev1.Pod, container string) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == container {
			return cs.State.Running != nil || cs.State.Terminated != nil || cs.LastTerminationState.Terminated != nil
		}
	}
	return false
}

// readTail reads r to its end keeping at least its last limit bytes (all
// when limit is 0) and reports whether it dropped any of it.
func readTail(r io.Reader, limit int64) (data []byte, dropped bool, err error) {
	if limit <= 0 {
		data, err = io.ReadAll(r)
		return data, false, err
	}
	buf := make([]byte, 0, 2*limit+1)
	chunk := make([]byte, 32*1024)
	for {
		n, err := r.Read(chunk)
		buf = append(buf, chunk[:n]...)
		if int64(len(buf)) > 2*limit {
			// Keep one byte more than limit, so TailOf still starts its
			// cut at a line boundary.
			buf = append(buf[:0], buf[int64(len(buf))-limit-1:]...)
			dropped = true
		}
		if errors.Is(err, io.EOF) {
			return buf, dropped, nil
		}
		if err != nil {
			return nil, dropped, err
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

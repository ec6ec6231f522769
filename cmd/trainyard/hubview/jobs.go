package hubview

import (
	"context"
	"fmt"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueueconstants "sigs.k8s.io/kueue/pkg/controller/constants"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// JobSummary is one line of `trainyard jobs`, and one item of its YAML or
// JSON output.
type JobSummary struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Queue     string `json:"queue,omitempty"`
	// Workload is the Kueue Workload's name once Kueue made it.
	Workload string `json:"workload,omitempty"`
	// Target, Attempt and Remote come from the live Dispatch.
	Target  string              `json:"target,omitempty"`
	Attempt int32               `json:"attempt,omitempty"`
	Remote  *v1alpha1.RemoteRef `json:"remote,omitempty"`
	// Phase is the live Dispatch's phase, else Pending, Admitted or Finished
	// from Kueue.
	Phase   string      `json:"phase"`
	Created metav1.Time `json:"created"`
	// Progress is the job's latest report (the TrainJob's
	// status.trainerStatus, which the hub writes).
	Progress *ProgressSummary `json:"progress,omitempty"`
}

// Summary is the job's line in a list.
func (s Job) Summary() JobSummary {
	js := JobSummary{
		Namespace: s.TrainJob.Namespace, Name: s.TrainJob.Name, Queue: s.TrainJob.Labels[kueueconstants.QueueLabel],
		Phase: s.Phase(), Created: s.TrainJob.CreationTimestamp, Progress: progressOf(s.TrainJob),
	}
	if s.Workload != nil {
		js.Workload = s.Workload.Name
	}
	if d := s.Live; d != nil {
		js.Target, js.Attempt, js.Remote = d.Spec.TargetName, d.Spec.Attempt, d.Status.Remote
	}
	return js
}

// GetJobs summarizes the TrainJobs of namespace ns ("" for all), or the
// named ones, with their Workloads and Dispatches: what `trainyard jobs`
// lists. Warnings say what could not be read.
func GetJobs(ctx context.Context, c client.Reader, ns string, names []string) ([]JobSummary, []string, error) {
	var tjs []trainer.TrainJob
	if len(names) == 0 {
		var l trainer.TrainJobList
		if err := c.List(ctx, &l, client.InNamespace(ns)); err != nil {
			return nil, nil, Explain(err)
		}
		tjs = l.Items
	}
	for _, n := range names {
		var tj trainer.TrainJob
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: n}, &tj); err != nil {
			return nil, nil, notFoundIn(Explain(err), ns)
		}
		tjs = append(tjs, tj)
	}
	lists, err := listWorkloadsAndDispatches(ctx, c, ns)
	if err != nil {
		return nil, nil, err
	}
	ix := NewIndex(lists.workloads, lists.dispatches)
	out := make([]JobSummary, 0, len(tjs))
	for i := range tjs {
		out = append(out, ix.Job(&tjs[i]).Summary())
	}
	return out, lists.warnings, nil
}

// JobInfo is a job's summary with what a picture of the fleet draws beside
// it.
type JobInfo struct {
	JobSummary
	// PodSets are the live Dispatch's placement.
	PodSets []v1alpha1.PodSetPlacement
	// Conditions are the TrainJob's.
	Conditions []metav1.Condition
}

// ListJobs summarizes the TrainJobs the user can list: all namespaces, or
// namespace ns when listing across namespaces is forbidden. Warnings say
// what could not be read.
func ListJobs(ctx context.Context, c client.Reader, ns string) ([]JobInfo, []string, error) {
	var warnings []string
	var l trainer.TrainJobList
	scope := ""
	err := c.List(ctx, &l)
	if apierrors.IsForbidden(err) && ns != "" {
		warnings = append(warnings, fmt.Sprintf("cannot list TrainJobs in all namespaces: showing namespace %s only", ns))
		scope = ns
		err = c.List(ctx, &l, client.InNamespace(ns))
	}
	if err != nil {
		return nil, warnings, Explain(err)
	}
	lists, err := listWorkloadsAndDispatches(ctx, c, scope)
	if err != nil {
		return nil, warnings, err
	}
	ix := NewIndex(lists.workloads, lists.dispatches)
	out := make([]JobInfo, 0, len(l.Items))
	for i := range l.Items {
		s := ix.Job(&l.Items[i])
		j := JobInfo{JobSummary: s.Summary(), Conditions: s.TrainJob.Status.Conditions}
		if s.Live != nil {
			j.PodSets = s.Live.Spec.PodSets
		}
		out = append(out, j)
	}
	return out, append(warnings, lists.warnings...), nil
}

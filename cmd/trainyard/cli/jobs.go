package cli

import (
	"fmt"
	"io"
	"strconv"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/spf13/cobra"
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

// summarize turns a job's state into its summary.
func summarize(s jobState) JobSummary {
	js := JobSummary{
		Namespace: s.tj.Namespace, Name: s.tj.Name, Queue: s.tj.Labels[kueueconstants.QueueLabel],
		Phase: s.phase(), Created: s.tj.CreationTimestamp, Progress: progressOf(s.tj),
	}
	if s.wl != nil {
		js.Workload = s.wl.Name
	}
	if d := s.live; d != nil {
		js.Target, js.Attempt, js.Remote = d.Spec.TargetName, d.Spec.Attempt, d.Status.Remote
	}
	return js
}

func newJobsCommand(e *env) *cobra.Command {
	var (
		f   hubFlags
		out string
	)
	formats := []string{outputWide, outputYAML, outputJSON, outputName}
	cmd := &cobra.Command{
		Use:     "jobs [NAME...]",
		Aliases: []string{"job", "trainjobs"},
		Short:   "List TrainJobs with their queue, target, phase and progress",
		Long: `List TrainJobs with their Kueue queue, the target their live Dispatch runs
on, and its phase; a job with no Dispatch shows its Kueue state (Pending,
Admitted or Finished). PROGRESS and ETA are the latest report of the job's
processes (Trainer's status API; the TrainJob's status.trainerStatus), "-"
when there is none; a job that has not finished and has not reported for
10 minutes shows "(stale AGE)" and no ETA. -o wide adds the attempt and the
remote job.
-o yaml|json prints these summaries; 'kubectl get trainjobs -o yaml' prints
the objects themselves.`,
		Example: e.examples("jobs -n team-a", "jobs -A -o wide"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(out, formats...); err != nil {
				return err
			}
			if f.allNamespaces && len(args) > 0 {
				return fmt.Errorf("a job name cannot be given with --all-namespaces")
			}
			h, err := f.connect()
			if err != nil {
				return err
			}
			jobs, err := getJobs(cmd, e, h, f.allNamespaces, args)
			if err != nil {
				return err
			}
			return printJobs(e.Out, out, jobs, printScope{all: f.allNamespaces, single: len(args) == 1, namespace: h.namespace}, e.clock.Now())
		},
	}
	f.addTo(cmd, true, true)
	addOutputFlag(cmd, &out, formats...)
	return cmd
}

// getJobs reads the TrainJobs (all, or the named ones) with their
// Workloads and Dispatches and summarizes them.
func getJobs(cmd *cobra.Command, e *env, h *hub, all bool, names []string) ([]JobSummary, error) {
	ctx, ns := cmd.Context(), h.namespace
	if all {
		ns = ""
	}
	var tjs []trainer.TrainJob
	if len(names) == 0 {
		var l trainer.TrainJobList
		if err := h.List(ctx, &l, client.InNamespace(ns)); err != nil {
			return nil, explain(err)
		}
		tjs = l.Items
	}
	for _, n := range names {
		var tj trainer.TrainJob
		if err := h.Get(ctx, client.ObjectKey{Namespace: ns, Name: n}, &tj); err != nil {
			return nil, notFoundIn(explain(err), ns)
		}
		tjs = append(tjs, tj)
	}
	lists, err := listWorkloadsAndDispatches(ctx, h, ns)
	if err != nil {
		return nil, err
	}
	for _, w := range lists.warnings {
		fmt.Fprintln(e.ErrOut, "warning:", w)
	}
	ix := newHubIndex(lists.workloads, lists.dispatches)
	out := make([]JobSummary, 0, len(tjs))
	for i := range tjs {
		out = append(out, summarize(ix.state(&tjs[i])))
	}
	return out, nil
}

// printScope says how the user asked: across namespaces, for one named job,
// or in one namespace (named in the empty-table message).
type printScope struct {
	all       bool
	single    bool
	namespace string
}

// printJobs writes job summaries in the chosen format.
func printJobs(w io.Writer, format string, jobs []JobSummary, scope printScope, now time.Time) error {
	switch format {
	case outputYAML, outputJSON:
		return printItems(w, format, jobs, scope.single)
	case outputName:
		for _, j := range jobs {
			fmt.Fprintf(w, "trainjob.%s/%s\n", trainer.GroupVersion.Group, j.Name)
		}
		return nil
	}
	if len(jobs) == 0 {
		msg := "No TrainJobs found."
		if !scope.all {
			msg = fmt.Sprintf("No TrainJobs found in %s namespace.", scope.namespace)
		}
		_, err := fmt.Fprintln(w, msg)
		return err
	}
	wide := format == outputWide
	tw := newTable(w)
	var head []string
	if scope.all {
		head = append(head, "NAMESPACE")
	}
	head = append(head, "NAME", "QUEUE", "TARGET", "PHASE", "PROGRESS", "ETA", "AGE")
	if wide {
		head = append(head, "ATTEMPT", "REMOTE")
	}
	row(tw, head...)
	for _, j := range jobs {
		var cells []string
		if scope.all {
			cells = append(cells, j.Namespace)
		}
		cells = append(cells, j.Name, orNone(j.Queue), orNone(j.Target), j.Phase,
			ProgressCell(j.Progress, j.Phase, now), ETACell(j.Progress, j.Phase, now), age(now, j.Created))
		if wide {
			attempt := none
			if j.Attempt > 0 {
				attempt = strconv.Itoa(int(j.Attempt))
			}
			cells = append(cells, attempt, orNone(j.Remote.String()))
		}
		row(tw, cells...)
	}
	return tw.Flush()
}

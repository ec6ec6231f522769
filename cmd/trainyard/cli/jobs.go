package cli

import (
	"fmt"
	"io"
	"strconv"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/spf13/cobra"

	"github.com/trainyard-dev/trainyard/cmd/trainyard/hubview"
)

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
			return printJobs(e.Out, out, jobs, printScope{all: f.allNamespaces, single: len(args) == 1, namespace: h.Namespace}, e.clock.Now())
		},
	}
	f.addTo(cmd, true, true)
	addOutputFlag(cmd, &out, formats...)
	return cmd
}

// getJobs reads the TrainJobs (all, or the named ones) with their
// Workloads and Dispatches and summarizes them.
func getJobs(cmd *cobra.Command, e *env, h *hubview.Hub, all bool, names []string) ([]hubview.JobSummary, error) {
	ns := h.Namespace
	if all {
		ns = ""
	}
	jobs, warnings, err := hubview.GetJobs(cmd.Context(), h, ns, names)
	if err != nil {
		return nil, err
	}
	for _, w := range warnings {
		fmt.Fprintln(e.ErrOut, "warning:", w)
	}
	return jobs, nil
}

// printScope says how the user asked: across namespaces, for one named job,
// or in one namespace (named in the empty-table message).
type printScope struct {
	all       bool
	single    bool
	namespace string
}

// printJobs writes job summaries in the chosen format.
func printJobs(w io.Writer, format string, jobs []hubview.JobSummary, scope printScope, now time.Time) error {
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
			hubview.ProgressCell(j.Progress, j.Phase, now), hubview.ETACell(j.Progress, j.Phase, now), age(now, j.Created))
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

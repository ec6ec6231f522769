package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/hubview"
)

func newLogsCommand(e *env) *cobra.Command {
	var f hubFlags
	o := hubview.LogsOptions{Command: e.name}
	cmd := &cobra.Command{
		Use:   "logs TRAINJOB",
		Short: "Print the output of a TrainJob, read on its spoke or Slurm cluster by the agent",
		Long: `Print the end of a TrainJob's output where it runs now: the rank-0 pod's
trainer container on a Kubernetes spoke (or the pod --replica names), or the
job's output files on a Slurm cluster. The CLI never talks to the spoke nor
to the agents' namespaces: it creates a LogRequest in the job's namespace,
the hub checks that you may get the TrainJob and its trainjobs/log
subresource, asks the target's agent and writes the answer, at most 512 KiB,
into the LogRequest's status, which the CLI prints and deletes. It needs
permission to create, get and delete LogRequests in the job's namespace.`,
		Example: e.examples("logs my-job -n team-a", "logs my-job --tail 50", "logs my-job --replica node-0-1"),
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.Tail < -1 || o.LimitBytes < 0 || o.LimitBytes > v1alpha1.MaxLogsBytes || o.Timeout <= 0 {
				return errors.New("--tail must be -1 or more, --limit-bytes 0 to 524288 and --request-timeout positive")
			}
			h, err := f.connect()
			if err != nil {
				return err
			}
			logs, err := hubview.FetchLogs(cmd.Context(), h, h.Namespace, args[0], o)
			if err != nil {
				return err
			}
			if _, err := fmt.Fprint(e.Out, logs.Text); err != nil {
				return err
			}
			if note := logs.Note(); note != "" {
				fmt.Fprintln(e.ErrOut, note)
			}
			return nil
		},
	}
	f.addTo(cmd, true, false)
	cmd.Flags().StringVar(&o.Replica, "replica", "", "replica to read, as <replicatedJob>-<jobIndex>-<podIndex> (default: rank 0)")
	cmd.Flags().Int64Var(&o.Tail, "tail", -1, "lines from the end to print (-1: all that fit the size limit)")
	cmd.Flags().Int64Var(&o.LimitBytes, "limit-bytes", 0, "bytes from the end to print at most (0: 512 KiB)")
	cmd.Flags().DurationVar(&o.Timeout, "request-timeout", 35*time.Second, "how long to wait for the answer")
	return cmd
}

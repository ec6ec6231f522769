package cli

import (
	"fmt"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/spf13/cobra"

	"github.com/trainyard-dev/trainyard/cmd/trainyard/hubview"
)

func newDescribeCommand(e *env) *cobra.Command {
	var (
		f   hubFlags
		out string
	)
	formats := []string{outputYAML, outputJSON, outputName}
	cmd := &cobra.Command{
		Use:   "describe JOB",
		Short: "Show a TrainJob's conditions, admission, placement, runtime snapshot, remote job and events",
		Long: `Show one TrainJob as the hub sees it: its conditions; its Kueue Workload's
admission and admission checks (trainyard's marked); the live Dispatch's
target, attempt, pod sets with their topology assignment, runtime snapshot,
remote job, phase and exit code; every stored attempt; and the recent events
of the TrainJob and the Workload.`,
		Example: e.examples("describe my-job -n team-a"),
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(out, formats...); err != nil {
				return err
			}
			h, err := f.connect()
			if err != nil {
				return err
			}
			d, warnings, err := hubview.DescribeJob(cmd.Context(), h, h.Namespace, args[0])
			if err != nil {
				return err
			}
			for _, w := range warnings {
				fmt.Fprintln(e.ErrOut, "warning:", w)
			}
			switch out {
			case outputYAML, outputJSON:
				return printStructured(e.Out, out, d)
			case outputName:
				_, err := fmt.Fprintf(e.Out, "trainjob.%s/%s\n", trainer.GroupVersion.Group, d.Name)
				return err
			}
			return printDescription(e.Out, d, e.clock.Now())
		},
	}
	f.addTo(cmd, true, false)
	addOutputFlag(cmd, &out, formats...)
	return cmd
}

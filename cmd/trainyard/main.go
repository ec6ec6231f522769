// Command trainyard is trainyard's CLI (also installable as the kubectl
// plugin kubectl-trainyard). Today it runs the local sandbox: `trainyard dev
// up` starts a hub with Kueue, two kwok GPU spokes and a Slurm cluster on
// this machine.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{
		Use:           "trainyard",
		Short:         "Dispatch Kubeflow TrainJobs from a Kueue hub to Kubernetes spokes and Slurm clusters",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newDevCommand())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

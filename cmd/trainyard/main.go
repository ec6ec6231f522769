// Command trainyard is trainyard's CLI, also installable as the kubectl
// plugin kubectl-trainyard: `targets`, `jobs` and `describe` read the hub
// cluster, `convert` turns Training Operator V1 jobs into TrainJobs, and
// `trainyard dev up` starts a hub with Kueue, two kwok GPU spokes and a
// Slurm cluster on this machine.
package main

import (
	"context"
	"os"

	"github.com/trainyard-dev/trainyard/cmd/trainyard/cli"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/dashboard"
)

func main() {
	name := cli.CommandName(os.Args[0])
	// The dashboard reads the hub through package cli, so it is added here
	// beside dev rather than in cli's root command (an import cycle).
	root := cli.NewRootCommand(cli.Options{Name: name}, newDevCommand(), dashboard.NewCommand(name))
	os.Exit(cli.Execute(context.Background(), root, os.Args[1:]))
}

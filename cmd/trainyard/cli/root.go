// Package cli holds the commands of the trainyard CLI that read the hub
// cluster (targets, jobs, describe, logs) and convert Training Operator V1
// jobs to TrainJobs: their flags and their printing. What they read of the
// hub is package hubview, which the dashboard reads too. The same binary
// installed as kubectl-trainyard is the kubectl plugin `kubectl trainyard`.
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/utils/clock"
)

// Streams are a command's standard streams.
type Streams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
}

// StdStreams returns the process's stdin, stdout and stderr.
func StdStreams() Streams { return Streams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr} }

// Options configure the root command.
type Options struct {
	// Name is the command as the user typed it: "trainyard" or
	// "kubectl trainyard" (see CommandName). Default "trainyard".
	Name string
	// Streams default to StdStreams().
	Streams Streams
	// Clock gives the time ages are computed against; default the real clock.
	Clock clock.PassiveClock
}

// DefaultName is the command's name when it is not run as a kubectl plugin.
const DefaultName = "trainyard"

// CommandName is the name usage lines show for a binary started as argv0:
// "kubectl trainyard" for kubectl-trainyard (kubectl's plugin naming), else
// "trainyard".
func CommandName(argv0 string) string {
	base := strings.TrimSuffix(filepath.Base(argv0), ".exe")
	if rest, ok := strings.CutPrefix(base, "kubectl-"); ok && rest != "" {
		// kubectl maps dashes in plugin names to subcommands and
		// underscores to dashes.
		return "kubectl " + strings.ReplaceAll(strings.ReplaceAll(rest, "-", " "), "_", "-")
	}
	return DefaultName
}

// env is what every subcommand shares: streams and the clock.
type env struct {
	Streams
	clock clock.PassiveClock
	// name is the command as typed, for examples.
	name string
}

// examples renders example lines with the command's name.
func (e *env) examples(lines ...string) string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = "  " + e.name + " " + l
	}
	return strings.Join(out, "\n")
}

// NewRootCommand returns the root command with the hub subcommands; extra
// commands (the sandbox's `dev`) are added beside them.
func NewRootCommand(o Options, extra ...*cobra.Command) *cobra.Command {
	if o.Name == "" {
		o.Name = DefaultName
	}
	if o.Streams == (Streams{}) {
		o.Streams = StdStreams()
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	e := &env{Streams: o.Streams, clock: o.Clock, name: o.Name}
	root := &cobra.Command{
		Use:   DefaultName,
		Short: "Dispatch Kubeflow TrainJobs from a Kueue hub to Kubernetes spokes and Slurm clusters",
		Long: `trainyard shows where the TrainJobs of a Kueue hub run and how its targets
(Kubernetes spokes and Slurm clusters) are doing, and converts Training
Operator V1 jobs to TrainJobs. Install the binary as kubectl-trainyard to use
it as "kubectl trainyard".`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: o.Name},
	}
	root.SetIn(o.Streams.In)
	root.SetOut(o.Streams.Out)
	root.SetErr(o.Streams.ErrOut)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w\nSee '%s --help' for usage", err, c.CommandPath())
	})
	root.AddCommand(newTargetsCommand(e), newJobsCommand(e), newDescribeCommand(e), newLogsCommand(e), newConvertCommand(e))
	root.AddCommand(extra...)
	return root
}

// Execute runs root with args (without the program name) and returns the
// process exit code: 0 on success, 1 on error, with the error on root's
// error stream as kubectl prints it.
func Execute(ctx context.Context, root *cobra.Command, args []string) int {
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(root.ErrOrStderr(), "error:", err)
		return 1
	}
	return 0
}

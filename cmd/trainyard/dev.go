package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox"
)

type devOptions struct {
	sandbox.Options
	detach bool
	// child runs the sandbox for a `dev up --detach` that started this
	// process: output goes to the log, readiness to the ready file.
	child bool
	// timeout bounds `dev up --detach`'s wait for the sandbox and `dev
	// down`'s wait for it to stop.
	timeout time.Duration
}

func newDevCommand() *cobra.Command {
	dev := &cobra.Command{Use: "dev", Short: "Local sandbox of real control planes and Slurm"}
	o := devOptions{}
	defaultDir := filepath.Join(os.TempDir(), "trainyard-dev")
	up := &cobra.Command{
		Use:   "up",
		Short: "Start a hub with Kueue, kwok GPU spokes and Slurm; Ctrl-C (or `dev down`) stops them all",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := filepath.Abs(o.Dir)
			if err != nil {
				return err
			}
			o.Dir = dir
			if err := o.Validate(); err != nil {
				return err
			}
			if o.detach {
				return devDetach(cmd.Context(), o, cmd.OutOrStdout())
			}
			return devUp(cmd.Context(), o)
		},
	}
	up.Flags().StringVar(&o.Dir, "dir", defaultDir, "folder for kubeconfigs, component logs and the sandbox's state")
	up.Flags().IntVar(&o.Spokes, "spokes", 2, "number of spoke clusters")
	up.Flags().BoolVar(&o.NoSlurm, "no-slurm", false, "do not start the Slurm clusters")
	up.Flags().IntVar(&o.SlurmInstance, "slurm-instance", 0, "which harness Slurm clusters to run: this one for target hpc, the next for hpc-oci (0-8, each with ports and a chroot clone of its own); 0-3 are the Slurm suites', 4-8 are free while make test runs")
	up.Flags().IntVar(&o.Nodes, "nodes", 4, "kwok GPU nodes per spoke")
	up.Flags().Int64Var(&o.GPUsPerNode, "gpus-per-node", 8, "GPUs per kwok node")
	up.Flags().IntVar(&o.Samples, "samples", 8, "sample TrainJobs (2 nodes x 4 GPUs) to submit; best-fit placement spreads them over Slurm and both spokes")
	up.Flags().BoolVar(&o.detach, "detach", false, "start the sandbox in the background, print how to reach it and return; `dev down` stops it")
	up.Flags().DurationVar(&o.timeout, "timeout", 10*time.Minute, "with --detach: how long to wait for the sandbox to be ready")
	up.Flags().BoolVar(&o.child, "detached-child", false, "")
	_ = up.Flags().MarkHidden("detached-child")

	downDir, downTimeout := defaultDir, 5*time.Minute
	down := &cobra.Command{
		Use:   "down",
		Short: "Stop the sandbox that `dev up` runs in the folder, and wait until all of it has stopped",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := filepath.Abs(downDir)
			if err != nil {
				return err
			}
			return devDown(cmd.Context(), dir, downTimeout, cmd.OutOrStdout())
		},
	}
	down.Flags().StringVar(&downDir, "dir", defaultDir, "the sandbox's folder (dev up --dir)")
	down.Flags().DurationVar(&downTimeout, "timeout", downTimeout, "how long to wait for the sandbox to stop")
	dev.AddCommand(up, down)
	return dev
}

// devUp runs the sandbox in this process until SIGINT, SIGTERM or SIGHUP
// arrives or stdout's reader goes away, then stops all of it before
// returning. SIGPIPE is caught, so a closed stdout pipe makes writes fail
// rather than killing the process before it has stopped its children.
func devUp(parent context.Context, o devOptions) (err error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	defer signal.Stop(sigs)
	out := newDevOutput(os.Stdout, cancel)
	go func() {
		for sig := range sigs {
			if sig == syscall.SIGPIPE {
				out.lost()
				continue
			}
			if ctx.Err() != nil {
				out.line("still stopping, please wait (logs in " + o.Dir + ")")
			}
			cancel()
		}
	}()
	if err := sandbox.Claim(o.Dir); err != nil {
		return err
	}
	defer sandbox.Release(o.Dir)
	o.Progress = out.line
	sb, err := sandbox.Start(ctx, o.Options)
	if err != nil {
		if ctx.Err() != nil && parent.Err() == nil {
			out.line("stopped before the sandbox was ready")
			return nil
		}
		return err
	}
	defer func() {
		sb.Stop()
		out.line("stopped")
	}()
	summary := readySummary(sb, o)
	out.line(summary)
	if o.child {
		if err := sandbox.MarkReady(o.Dir, summary); err != nil {
			return err
		}
	}
	watchDispatches(ctx, sb, out)
	return nil
}

// readySummary says how to reach the sandbox and what runs in it.
func readySummary(sb *sandbox.Sandbox, o devOptions) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CLUSTER\tROLE\tACCESS")
	for _, a := range sb.Access() {
		fmt.Fprintf(w, "%s\t%s\t%s\n", a.Cluster, a.Role, a.Access)
	}
	_ = w.Flush()
	fmt.Fprintf(&b, "hub and %d agents running (metrics %s); ready in %v\n", len(sb.Controllers.Agents),
		sb.Controllers.MetricsURL, sb.Ready.Round(time.Millisecond))
	fmt.Fprintf(&b, "submitted %d sample TrainJobs to queue %s/%s", o.Samples, sandbox.SampleNamespace, sandbox.SampleQueue)
	return b.String()
}

// devDetach starts `dev up` in a session of its own with its output in
// the sandbox's log, waits until it is ready and prints how to reach it.
// If the start fails, or the wait is interrupted, it stops it again.
func devDetach(ctx context.Context, o devOptions, out io.Writer) error {
	if pid, ok := sandbox.Running(o.Dir); ok {
		return fmt.Errorf("a sandbox runs in %s already (pid %d): stop it with `trainyard dev down --dir %s`", o.Dir, pid, o.Dir)
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return err
	}
	_ = os.Remove(sandbox.ReadyPath(o.Dir))
	logf, err := os.Create(sandbox.LogPath(o.Dir))
	if err != nil {
		return err
	}
	defer logf.Close()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	args := []string{"dev", "up", "--detached-child", "--dir", o.Dir, "--spokes", strconv.Itoa(o.Spokes),
		"--nodes", strconv.Itoa(o.Nodes), "--gpus-per-node", strconv.FormatInt(o.GPUsPerNode, 10),
		"--samples", strconv.Itoa(o.Samples), "--no-slurm=" + strconv.FormatBool(o.NoSlurm),
		"--slurm-instance", strconv.Itoa(o.SlurmInstance)}
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// A session of its own: no terminal, no Ctrl-C of the shell's group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the sandbox: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	deadline := time.After(o.timeout)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	stop := func(why string) error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-exited
		return fmt.Errorf("%s; the sandbox was stopped again (log: %s)", why, sandbox.LogPath(o.Dir))
	}
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("the sandbox exited before it was ready (%v):\n%s", err, tail(sandbox.LogPath(o.Dir), 2000))
		case <-sigs:
			return stop("interrupted")
		case <-ctx.Done():
			return stop(ctx.Err().Error())
		case <-deadline:
			return stop(fmt.Sprintf("not ready within %v", o.timeout))
		case <-tick.C:
			summary, err := os.ReadFile(sandbox.ReadyPath(o.Dir))
			if err != nil {
				continue
			}
			fmt.Fprintf(out, "%s\nsandbox running in the background (pid %d, log %s)\nstop it with: %s dev down --dir %s\n",
				summary, cmd.Process.Pid, sandbox.LogPath(o.Dir), commandName(), o.Dir)
			return nil
		}
	}
}

// devDown stops the sandbox running in dir and waits until its process,
// which stops all its children first, has exited.
func devDown(ctx context.Context, dir string, timeout time.Duration, out io.Writer) error {
	pid, ok := sandbox.Running(dir)
	if !ok {
		fmt.Fprintf(out, "no sandbox runs in %s\n", dir)
		return nil
	}
	t0 := time.Now()
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stop the sandbox (pid %d): %w", pid, err)
	}
	fmt.Fprintf(out, "stopping the sandbox in %s (pid %d) ...\n", dir, pid)
	deadline := time.After(timeout)
	for sandbox.Alive(pid) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("the sandbox (pid %d) did not stop within %v; its log: %s", pid, timeout, sandbox.LogPath(dir))
		case <-time.After(200 * time.Millisecond):
		}
	}
	fmt.Fprintf(out, "stopped in %v\n", time.Since(t0).Round(100*time.Millisecond))
	return nil
}

func commandName() string {
	if strings.HasPrefix(filepath.Base(os.Args[0]), "kubectl-") {
		return "kubectl trainyard"
	}
	return "trainyard"
}

// tail returns the last n bytes of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// devOutput writes dev up's output; once stdout's reader is gone it drops
// everything and asks the sandbox to stop.
type devOutput struct {
	mu     sync.Mutex
	w      *os.File
	gone   bool
	onGone func()
}

func newDevOutput(w *os.File, onGone func()) *devOutput {
	return &devOutput{w: w, onGone: onGone}
}

func (o *devOutput) write(s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.gone {
		return
	}
	if _, err := io.WriteString(o.w, s); err != nil && errors.Is(err, syscall.EPIPE) {
		o.gone = true
		go o.onGone()
	}
}

func (o *devOutput) line(s string) { o.write(s + "\n") }

// lost records that stdout's reader is gone (SIGPIPE, or a hang-up).
func (o *devOutput) lost() {
	o.mu.Lock()
	o.gone = true
	o.mu.Unlock()
	o.onGone()
}

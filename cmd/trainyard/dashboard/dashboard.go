// Package dashboard is `trainyard dashboard`: a local web UI of the hub.
// It shows a map of the fleet (each Target's topology domains with the
// free and used GPUs of every node, its health and heartbeat), Kueue's
// ClusterQueue and cohort usage against quota, the TrainJobs the user can
// list with their progress, and a page per job with its progress (a bar,
// the ETA, the latest metrics and their curves over the attempt's life,
// drawn as SVG on the server from the progress history), placement,
// attempts, conditions, events and logs. The pages are Go templates with inline SVG and a little
// JavaScript that reloads their content every 2 s, all embedded in the
// binary.
//
// The server listens on 127.0.0.1 only and reads the hub with the user's
// own kubeconfig, so it shows exactly what the user's RBAC allows. It reads
// what `trainyard jobs`, `describe` and `logs` read (package hubview), never
// Secrets, and never a TrainJob's or runtime's pod specs (their env).
package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/trainyard-dev/trainyard/cmd/trainyard/hubview"
)

// DefaultPort is the port `trainyard dashboard` listens on without --port.
const DefaultPort = 7480

// shutdownGrace bounds how long open requests may finish on exit.
const shutdownGrace = 5 * time.Second

// NewCommand returns the `dashboard` command; name is the command as the
// user typed it ("trainyard" or "kubectl trainyard").
func NewCommand(name string) *cobra.Command {
	var (
		kubeconfig, kubeContext string
		port                    int
	)
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve a local web UI of the fleet, the quota and the TrainJobs on 127.0.0.1",
		Long: `Serve a web UI on http://127.0.0.1:PORT/ that shows the hub as your
kubeconfig lets you see it: a map of every Target's topology with the free
and used GPUs of each node, its health and heartbeat; each ClusterQueue's and
cohort's usage against quota; the TrainJobs you can list with their
progress, filterable by namespace, queue, target and phase; and a page per
job with its progress bar, ETA and metric curves, placement, attempts,
conditions, events and logs. Pages update every 2 s. The server
listens on 127.0.0.1 only; --port 0 picks a free port. Ctrl-C stops it.`,
		Example: fmt.Sprintf("  %s dashboard\n  %s dashboard --port 9000 --kubeconfig ~/.kube/hub", name, name),
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if port < 0 || port > 65535 {
				return fmt.Errorf("--port %d is not a TCP port", port)
			}
			h, err := hubview.Connect(kubeconfig, kubeContext, "")
			if err != nil {
				return err
			}
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			fmt.Fprintf(cmd.OutOrStdout(), "trainyard dashboard on http://%s/ (Ctrl-C stops it)\n", l.Addr())
			return Serve(ctx, l, Options{Client: h.Client, Namespace: h.Namespace})
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "path to the hub's kubeconfig file")
	cmd.Flags().StringVar(&kubeContext, "context", "", "kubeconfig context to use")
	cmd.Flags().IntVar(&port, "port", DefaultPort, "port on 127.0.0.1 to listen on (0: any free port)")
	return cmd
}

// Serve serves the dashboard on l until ctx ends, then closes l.
func Serve(ctx context.Context, l net.Listener, o Options) error {
	h, err := NewHandler(o, l.Addr().String())
	if err != nil {
		_ = l.Close()
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	err = srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		<-done
		return nil
	}
	return err
}

package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/trainyard-dev/trainyard/test/harness/kube"
	"github.com/trainyard-dev/trainyard/test/harness/slurm"
)

type devOptions struct {
	dir     string
	spokes  int
	noSlurm bool
	gpus    int64
	nodes   int
	samples int
}

func newDevCommand() *cobra.Command {
	dev := &cobra.Command{Use: "dev", Short: "Local sandbox of real control planes and Slurm"}
	o := devOptions{}
	up := &cobra.Command{
		Use:   "up",
		Short: "Start a hub with Kueue, kwok GPU spokes and Slurm; Ctrl-C stops them all",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return devUp(ctx, o)
		},
	}
	up.Flags().StringVar(&o.dir, "dir", filepath.Join(os.TempDir(), "trainyard-dev"), "folder for kubeconfigs and component logs")
	up.Flags().IntVar(&o.spokes, "spokes", 2, "number of spoke clusters")
	up.Flags().BoolVar(&o.noSlurm, "no-slurm", false, "do not start the Slurm cluster")
	up.Flags().IntVar(&o.nodes, "nodes", 4, "kwok GPU nodes per spoke")
	up.Flags().Int64Var(&o.gpus, "gpus-per-node", 8, "GPUs per kwok node")
	up.Flags().IntVar(&o.samples, "samples", 8, "sample TrainJobs (2 nodes x 4 GPUs) to submit; best-fit placement spreads them over Slurm and both spokes")
	dev.AddCommand(up)
	return dev
}

func devUp(ctx context.Context, o devOptions) error {
	if err := os.RemoveAll(o.dir); err != nil {
		return err
	}
	t0 := time.Now()
	fmt.Printf("starting hub and %d spokes (logs in %s) ...\n", o.spokes, o.dir)
	fleet, err := kube.StartFleet(ctx, kube.FleetOptions{Spokes: o.spokes, Dir: o.dir})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("stopping the fleet ...")
		_ = fleet.Stop()
	}()
	for _, s := range fleet.Spokes {
		var nodes []kube.NodeSpec
		for i := 0; i < o.nodes; i++ {
			nodes = append(nodes, kube.NodeSpec{
				Name: fmt.Sprintf("%s-gpu-%d", s.Name, i), GPUs: o.gpus,
				Labels: map[string]string{"topology.kubernetes.io/rack": fmt.Sprintf("rack-%d", i/2)},
			})
		}
		if err := s.AddKwokNodes(ctx, nodes...); err != nil {
			return err
		}
	}
	var sl *slurm.Cluster
	if !o.noSlurm {
		fmt.Println("starting Slurm ...")
		if sl, err = slurm.Start(ctx, slurm.Options{}); err != nil {
			return fmt.Errorf("slurm: %w (use --no-slurm to go without)", err)
		}
		defer func() {
			fmt.Println("stopping Slurm ...")
			_ = sl.Stop()
		}()
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CLUSTER\tROLE\tACCESS")
	fmt.Fprintf(w, "%s\thub (Kueue %s)\tKUBECONFIG=%s\n", fleet.Hub.Name, "v0.19.0", fleet.Hub.Kubeconfig)
	for _, s := range fleet.Spokes {
		fmt.Fprintf(w, "%s\tspoke (%d kwok nodes x %d GPUs)\tKUBECONFIG=%s\n", s.Name, o.nodes, o.gpus, s.Kubeconfig)
	}
	if sl != nil {
		fmt.Fprintf(w, "slurm\tSlurm 24.11 (slurmrestd)\t%s (chroot %s)\n", sl.URL, sl.Root)
	}
	w.Flush()
	controllers, err := startTrainyard(ctx, fleet, sl, o)
	if err != nil {
		return err
	}
	defer controllers.Stop()
	fmt.Printf("hub and %d agents running (metrics %s); ready in %v\n", len(controllers.Agents), controllers.MetricsURL,
		time.Since(t0).Round(time.Millisecond))
	if err := submitSamples(ctx, fleet, o.samples); err != nil {
		return err
	}
	fmt.Printf("submitted %d sample TrainJobs to queue %s/%s; press Ctrl-C to stop everything\n", o.samples, sampleNamespace, sampleQueue)
	watchDispatches(ctx, fleet)
	return nil
}

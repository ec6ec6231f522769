// Package cli runs the trainyard CLI in-process against a real API server
// holding trainyard's, Trainer's and Kueue's CRDs. Only the hub's LogRequest
// relay runs: the test writes Targets, TrainJobs, Workloads and Dispatches
// with their status the way the hub and agents would, plays the agents'
// logs answers, and checks what the commands print and their exit codes.
package cli

import (
	"context"
	"fmt"
	"os"
	"testing"

	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
)

var hub *kube.Cluster

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	hub, err = kube.Start(context.Background(), kube.Options{
		Name: "cli", CRDs: []string{kube.CRDsKueue, kube.CRDsTrainer, kube.CRDsTrainyard},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start API server:", err)
		return 1
	}
	defer hub.Stop()
	if err := seed(context.Background(), hub.Client); err != nil {
		fmt.Fprintln(os.Stderr, "seed objects:", err)
		return 1
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	if err := startRelay(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "start the LogRequest relay:", err)
		return 1
	}
	return m.Run()
}

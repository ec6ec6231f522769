// Package cli runs the trainyard CLI in-process against a real API server
// holding trainyard's, Trainer's and Kueue's CRDs. No controller runs: the
// test writes Targets, TrainJobs, Workloads and Dispatches with their status
// the way the hub and agents would, and checks what the commands print and
// their exit codes.
package cli

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/trainyard-dev/trainyard/test/harness/kube"
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
	return m.Run()
}

package slurm_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/slurm"
)

var (
	cluster *slurm.Cluster
	// aliceToken authenticates every REST call of the tests; it is never logged.
	aliceToken string
)

// TestMain starts one real cluster for the package. It is stopped on every way out:
// normally by the deferred Stop, and on a panic or timeout (which kill the process
// before defers run) by the reaper that slurm.Start leaves behind.
func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("skipping Slurm integration tests in -short mode")
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	var err error
	cluster, err = slurm.Start(ctx, slurm.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: start Slurm cluster:", err)
		return 1
	}
	fmt.Printf("slurm cluster up in %s at %s\n", time.Since(start).Round(100*time.Millisecond), cluster.URL)
	defer func() {
		// A failing stop leaks daemons or mounts on the machine: that fails the run.
		if err := cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: stop Slurm cluster:", err)
			code = 1
		}
	}()
	if aliceToken, err = cluster.Token("alice", time.Hour); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	// Job ids restart at 1 on every start: drop outputs of earlier runs.
	if _, err := cluster.ExecAs(ctx, tenant, "sh", "-c", "rm -rf "+outDir+" && mkdir -p "+outDir); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	return m.Run()
}

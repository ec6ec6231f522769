// Package fleet proves the multi-cluster harness: a hub with a real Kueue
// and two spokes whose JobSets run as pods on kwok GPU nodes.
package fleet

import (
	"context"
	"fmt"
	"os"
	"testing"

	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/test/util"
)

var fleet *kube.Fleet

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	f, err := kube.StartFleet(context.Background(), kube.FleetOptions{Spokes: 2, Dir: os.Getenv("TRAINYARD_ARTIFACTS")})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start fleet:", err)
		return 1
	}
	fmt.Printf("fleet of hub + %d spokes started in %v\n", len(f.Spokes), f.StartDuration.Round(100_000_000))
	fleet = f
	defer func() {
		util.DumpLogsOnFailure(code, append([]*kube.Cluster{f.Hub}, f.Spokes...)...)
		_ = f.Stop()
	}()
	return m.Run()
}

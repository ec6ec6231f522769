// Package fleet proves the multi-cluster harness: a hub with a real Kueue
// and two spokes whose JobSets run as pods on kwok GPU nodes.
package fleet

import (
	"context"
	"os"
	"testing"

	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/test/util"
)

var fleet *kube.Fleet

func TestMain(m *testing.M) {
	os.Exit(util.RunFleetSuite(m, util.FleetSuite{
		Fleet: kube.FleetOptions{Spokes: 2},
		// Only the harness runs: no trainyard, nothing of it to log.
		KeepLogger: true,
		SetUp: func(_ context.Context, e *util.FleetEnv) error {
			fleet = e.Fleet
			return nil
		},
	}))
}

package inflight

import (
	"time"

	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// t0 is the tests' fixed now.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// spokeTarget is a Kubernetes target that takes no queued jobs, so that a
// test of room and waiting reads what fits now; TestQueuedStartWakesWaiting
// and depth_test.go cover the queue.
func spokeTarget(name, flavor string) *tytesting.TargetWrapper {
	return tytesting.MakeKubernetesTarget(name, flavor).KubernetesQueueDepth(0)
}

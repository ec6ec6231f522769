package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/slurm"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/internal/metrics"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// queueDepths are the spec.slurm.queueDepth values the Slurm benchmark
// measures, to choose the default from (docs/operator-guide.md); the
// shallowest last, as it leaves the most Workloads in Kueue's back-off.
var queueDepths = []int32{32, 8, 2, 0}

// depthRoundLimit bounds one round of the sweep: a round that has not
// started every job by then reports how many it started.
const depthRoundLimit = 5 * time.Minute

// slurmDepthRows runs the TrainJob round again at each queue depth and
// adds a row for each, with its ratio to the raw round.
func slurmDepthRows(b *testing.B, fleet *kube.Fleet, c *slurm.Client, target string, n, round int, raw time.Duration) {
	for _, depth := range queueDepths {
		setQueueDepth(b, fleet, target, depth)
		before := readHubCost()
		what := fmt.Sprintf("Slurm: same, queueDepth %d", depth)
		took, started, load, notes := slurmRoundWithin(b, fleet, c, n, fmt.Sprintf("qd%d-%d-", depth, round), depthRoundLimit)
		if started < n {
			row(append(append([]string{what, strconv.Itoa(n), fmt.Sprintf("%d started in %.0f", started, took.Seconds()),
				fmt.Sprintf("%.1f", float64(started)/took.Seconds()), ""}, before.cells()...), load, "", "", notes)...)
			continue
		}
		b.ReportMetric(float64(n)/took.Seconds(), fmt.Sprintf("trainjobs-depth-%d/s", depth))
		row(append(append(rateCells(what, n, took, raw), before.cells()...), load, "", "", notes)...)
	}
}

func setQueueDepth(b *testing.B, fleet *kube.Fleet, target string, depth int32) {
	ctx := context.Background()
	var t v1alpha1.Target
	if err := fleet.Hub.Client.Get(ctx, client.ObjectKey{Name: target}, &t); err != nil {
		b.Fatal(err)
	}
	patch := client.MergeFrom(t.DeepCopy())
	t.Spec.Slurm.QueueDepth = ptr.To(depth)
	if err := fleet.Hub.Client.Patch(ctx, &t, patch); err != nil {
		b.Fatal(err)
	}
}

// slurmRound submits n short TrainJobs named prefix* and waits until Slurm
// started them all, sampling the agent's load on slurmrestd meanwhile. It
// first waits for the cluster to be idle, so rounds do not overlap. It
// returns the time, the agent's load and notes (slurmRoundWithin).
func slurmRound(b *testing.B, fleet *kube.Fleet, c *slurm.Client, n int, prefix string) (time.Duration, string, string) {
	took, started, load, notes := slurmRoundWithin(b, fleet, c, n, prefix, 10*time.Minute)
	if started < n {
		b.Fatalf("slurm jobs %s* started: %d of %d after %s", prefix, started, n, took.Round(time.Second))
	}
	return took, load, notes
}

// slurmRoundWithin is slurmRound that gives up after limit, saying how
// many jobs started by then. Its notes are the CPU time per job of the
// hub's control plane and of this process (the Slurm daemons are not
// counted) and when the last job passed each step on the hub.
func slurmRoundWithin(b *testing.B, fleet *kube.Fleet, c *slurm.Client, n int, prefix string, limit time.Duration) (time.Duration, int, string, string) {
	waitIdle(b, c)
	ctx, hub := context.Background(), fleet.Hub.Client
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	st := newStages()
	st.watch(watchCtx, b, fleet)
	t0, cpu := time.Now(), newCPUMeter(fleet)
	load := startAgentLoad(metrics.SystemSlurmrestd)
	parallel(b, n, func(i int) error {
		return createTrainJob(ctx, hub, tytesting.MakeTrainJob(prefix+strconv.Itoa(i), "bench").Queue("lq").
			RuntimeRef(trainer.ClusterTrainingRuntimeKind, "bench").NumNodes(1).GPUsPerNode(1).
			Command([]string{"true"}).Obj())
	})
	started := waitStartedSampling(c, prefix, n, load, t0.Add(limit))
	return time.Since(t0), started, load.cell(), roundNotes(cpu, max(started, 1), st)
}

// waitStartedSampling waits until n Slurm jobs named prefix* have
// started, or until deadline, sampling how many of them run; it returns
// how many started.
func waitStartedSampling(c *slurm.Client, prefix string, n int, load *agentLoad, deadline time.Time) int {
	last := 0
	for time.Now().Before(deadline) {
		jobs, err := c.Jobs(context.Background())
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		started, running := map[string]bool{}, 0
		for i := range jobs {
			j := &jobs[i]
			if !strings.HasPrefix(j.Name, prefix) {
				continue
			}
			if slurm.StatusOf(j).Phase != v1alpha1.DispatchSubmitted {
				started[j.Name] = true
			}
			if slurm.StatusOf(j).Phase == v1alpha1.DispatchRunning {
				running++
			}
		}
		load.sample(running)
		if last = len(started); last >= n {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return last
}

// waitIdle waits until no job of the cluster pends or runs.
func waitIdle(b *testing.B, c *slurm.Client) {
	waitFor(b, "slurm idle", func() (int, error) {
		jobs, err := c.Jobs(context.Background())
		if err != nil {
			return 0, err
		}
		for i := range jobs {
			if !slurm.Ended(&jobs[i]) {
				return 0, nil
			}
		}
		return 1, nil
	}, 1)
}

package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/slurm"
	trainyard "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/controllers"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	hslurm "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/slurm"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// BenchmarkSlurmDispatchThroughput measures how fast short TrainJobs go
// from creation on the hub to started (RUNNING, or already done) Slurm
// jobs, against the same jobs submitted straight to slurmrestd in the same
// run. Both sides are timed on Slurm's own start times; the cluster runs at
// most 16 of these 1-GPU jobs at once, so both are bounded by how fast
// Slurm cycles them, and the ratio shows what trainyard adds.
func BenchmarkSlurmDispatchThroughput(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("the Slurm harness needs root")
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	n := 200
	if v, err := strconv.Atoi(os.Getenv("TRAINYARD_BENCH_JOBS")); err == nil && v > 0 {
		n = v
	}
	env := startSlurmBench(b, 0, time.Second)
	defer env.stop()
	fleet, c := env.fleet, env.client

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		raw := rawSlurmJobs(b, c, n, i)
		before := readHubCost()
		ty, load, notes := slurmRound(b, fleet, c, n, fmt.Sprintf("ty-%d-", i))
		b.ReportMetric(float64(n)/raw.Seconds(), "raw-slurm-jobs/s")
		b.ReportMetric(float64(n)/ty.Seconds(), "trainjobs/s")
		b.ReportMetric(raw.Seconds()/ty.Seconds(), "ratio")
		row(rateCells("Slurm: raw slurmrestd submissions", n, raw)...)
		row(append(append(rateCells(fmt.Sprintf("Slurm: TrainJobs to one Slurm target (default queueDepth %d)", v1alpha1.DefaultSlurmQueueDepth),
			n, ty, raw), before.cells()...), load, "", "", notes)...)
		if os.Getenv("TRAINYARD_BENCH_DEPTHS") != "0" {
			slurmDepthRows(b, fleet, c, "hpc", n, i, raw)
		}
	}
}

// slurmBench is a harness Slurm cluster registered as Target hpc (flavor
// hpc, partition gpu, namespace bench as alice), a hub with the queue lq
// and the runtime bench, trainyard's hub and agent, and a client of the
// cluster's slurmrestd.
type slurmBench struct {
	fleet  *kube.Fleet
	client *slurm.Client
	stops  []func()
}

func (e *slurmBench) stop() {
	for i := len(e.stops) - 1; i >= 0; i-- {
		e.stops[i]()
	}
}

// startSlurmBench starts it on the harness Slurm instance, the agent
// polling every poll (0: the agent's default).
func startSlurmBench(b *testing.B, instance int, poll time.Duration) *slurmBench {
	ctx, env := context.Background(), &slurmBench{}
	fail := func(err error) {
		env.stop()
		b.Fatal(err)
	}
	cluster, err := hslurm.Start(ctx, hslurm.Options{Log: io.Discard, Instance: instance})
	if err != nil {
		b.Fatal(err)
	}
	env.stops = append(env.stops, func() { _ = cluster.Stop() })
	if env.fleet, err = kube.StartFleet(ctx, kube.FleetOptions{HubOnly: true, Dir: os.Getenv("TRAINYARD_ARTIFACTS")}); err != nil {
		fail(err)
	}
	env.stops = append(env.stops, func() { _ = env.fleet.Stop() })
	if err := trainyard.SetUpQueue(ctx, env.fleet.Hub, trainyard.Queue{
		ClusterQueue: "cq", Namespace: "bench", LocalQueue: "lq", Flavor: "hpc", GPUs: "10000",
	}); err != nil {
		fail(err)
	}
	if err := env.fleet.Hub.Client.Create(ctx, tytesting.MakeClusterTrainingRuntime("bench").Obj()); err != nil {
		fail(err)
	}
	controllers, err := trainyard.Start(ctx, env.fleet, trainyard.Options{Flavor: "hpc", Slurm: []trainyard.SlurmTarget{{
		Name: "hpc", Cluster: cluster, APIVersion: "v0.0.42", PollInterval: poll,
		Partitions: []v1alpha1.SlurmPartition{{Flavor: "hpc", Partition: "gpu"}},
		Accounts:   []v1alpha1.SlurmAccount{{Namespace: "bench", User: "alice"}},
	}}})
	if err != nil {
		fail(err)
	}
	env.stops = append(env.stops, controllers.Stop)
	if env.client, err = cluster.RESTClient("v0.0.42"); err != nil {
		fail(err)
	}
	return env
}

// shortJob is what both paths run: the Torchrun launcher with `true`.
func shortJob(name string) *slurm.Job {
	return &slurm.Job{
		Name: name, Comment: "bench-raw", Partition: "gpu", User: "alice", Nodes: 1, TasksPerNode: 1, GPUsPerNode: 1,
		Env:    []string{slurm.EnvArgv + "=" + mustArgv("true"), slurm.EnvNprocPerNode + "=1"},
		Script: slurm.Script(v1alpha1.LauncherTorchrun), StdoutPath: "/dev/null", StderrPath: "/dev/null",
	}
}

func mustArgv(argv ...string) string {
	s, err := slurm.EncodeArgv(argv)
	if err != nil {
		panic(err)
	}
	return s
}

func rawSlurmJobs(b *testing.B, c *slurm.Client, n, round int) time.Duration {
	prefix := fmt.Sprintf("raw-%d-", round)
	t0 := time.Now()
	parallel(b, n, func(i int) error {
		_, err := c.Submit(context.Background(), shortJob(prefix+strconv.Itoa(i)))
		return err
	})
	waitStarted(b, c, prefix, n)
	return time.Since(t0)
}

// waitStarted waits until n Slurm jobs named prefix* have a start time.
func waitStarted(b *testing.B, c *slurm.Client, prefix string, n int) {
	waitFor(b, "slurm jobs "+prefix+"* started", func() (int, error) {
		jobs, err := c.Jobs(context.Background())
		if err != nil {
			return 0, err
		}
		started := map[string]bool{}
		for i := range jobs {
			j := &jobs[i]
			if strings.HasPrefix(j.Name, prefix) && slurm.StatusOf(j).Phase != v1alpha1.DispatchSubmitted {
				started[j.Name] = true
			}
		}
		return len(started), nil
	}, n)
}

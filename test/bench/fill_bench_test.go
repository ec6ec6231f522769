package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/slurm"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/internal/metrics"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// fillSample is how often a fill round reads slurmctld's job list while
// it waits for the last start; the means come from Slurm's own start and
// end times, so sampling sparsely costs the round no precision.
const fillSample = time.Second

// fillInstance is the harness Slurm instance the fill rounds run on, apart
// from the suites' (0 to 4), so that one running beside it holds nothing up.
const fillInstance = 6

// BenchmarkFill measures whether trainyard keeps a Slurm cluster as busy
// as raw submissions of the same backlog do: n jobs that each run for a
// fixed time (TRAINYARD_BENCH_FILL_JOBS, default 200;
// TRAINYARD_BENCH_FILL_SECONDS, default 10) go straight to slurmrestd,
// then, on the same cluster once it is idle, as TrainJobs through the hub
// and the agent at the defaults a site runs with (the agent's 2 s poll,
// the Target's default queue depth). Both rounds read slurmctld's job
// list until the last job started, and the window in which the backlog
// waits is from the first submit to that start.
//
// It prints `fill: slurm <ratio>`, the mean number of running jobs under
// trainyard over that under raw submissions, and rows with each round's
// mean, its start latency (submit to Slurm's start time) p50 and p95, and
// where the idle slot-time went: with jobs pending in slurmctld (its own
// scheduling) or with none (nothing sent yet: for trainyard, Kueue's
// admission, the hub's decision, the agent's poll and submit).
func BenchmarkFill(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("the Slurm harness needs root")
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	n, run := envInt("TRAINYARD_BENCH_FILL_JOBS", 200), envInt("TRAINYARD_BENCH_FILL_SECONDS", 10)
	ctx := context.Background()
	env := startSlurmBench(b, fillInstance, 0)
	defer env.stop()
	fleet, c := env.fleet, env.client
	slots := gpuSlots(b, c)
	argv := []string{"sleep", strconv.Itoa(run)}

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		raw := fillRound(b, c, slots, n, fmt.Sprintf("fraw-%d-", i), nil, func(name string) error {
			j := shortJob(name)
			j.Env[0] = slurm.EnvArgv + "=" + mustArgv(argv...)
			_, err := c.Submit(ctx, j)
			return err
		})
		st := newStages()
		watchCtx, stop := context.WithCancel(ctx)
		st.watch(watchCtx, b, fleet)
		before, load := readHubCost(), startAgentLoad(metrics.SystemSlurmrestd)
		api, cpu := startAPIMeter(fleet.Hub.Config), newCPUMeter(fleet)
		ty := fillRound(b, c, slots, n, fmt.Sprintf("fty-%d-", i), load, func(name string) error {
			return createTrainJob(ctx, fleet.Hub.Client, tytesting.MakeTrainJob(name, "bench").Queue("lq").
				RuntimeRef(trainer.ClusterTrainingRuntimeKind, "bench").NumNodes(1).GPUsPerNode(1).Command(argv).Obj())
		})
		hubCells, loadCell, passes := before.cells(), load.cell(), passesPerJob(before, readHubCost(), n)
		waitQueueDrained(b, fleet.Hub)
		costs, reqs := cpu.cell(n), hubRequests(b, api)
		stop()
		ratio := ty.mean() / raw.mean()
		fmt.Printf("fill: slurm %.2f\n", ratio)
		b.ReportMetric(ratio, "fill-slurm")
		what := fmt.Sprintf("Slurm fill, %d jobs of %d s on %d slots", n, run, slots)
		row(append(raw.cells(what+": raw slurmrestd submissions"), "", "", "", raw.p(0.5), raw.p(0.95), raw.notes())...)
		row(append(append(ty.cells(what+": TrainJobs", raw), hubCells...), loadCell, ty.p(0.5), ty.p(0.95),
			ty.notes()+"; "+pipeline(b, fleet, st, ty))...)
		b.ReportMetric(reqs.writes(n), "hub-writes/job")
		costRow("Cost per job: Slurm fill, TrainJobs (trainyard in the bench's process)", n, reqs,
			costs+"; reconcile passes per job (hub and agent): "+passes)
	}
}

// gpuSlots is how many 1-GPU jobs the cluster's gpu partition runs at once.
func gpuSlots(b *testing.B, c *slurm.Client) int {
	nodes, err := c.Nodes(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	q := slurm.CapacityOf(nodes, map[string]bool{"gpu": true}, nil).Capacity[v1alpha1.GPUResource]
	return int(q.Value())
}

// fill is one round: when each job was submitted and when Slurm started
// and ended it (by name), and the idle slot-time each sample saw.
type fill struct {
	slots       int
	start, last time.Time
	jobs        map[string]*fillJob
	// idlePending and idleStarved are the idle slot-seconds with and
	// without jobs of the round pending in slurmctld.
	idlePending, idleStarved float64
	// afterSubmit is the part of idlePending in which a pending job had
	// not been looked at by slurmctld's scheduler since its submit (reason
	// None: with defer_batch a submit waits for the next pass); the rest
	// is a slot freed since the last pass (the pending jobs' reasons are
	// that pass's). completing is the idle slot-seconds of samples in
	// which a job of the round was completing (its epilog holds its node).
	afterSubmit float64
	completing  float64
	// runningSeconds is the running jobs the samples saw, times the time
	// each stood for: over the window, the mean as sampled.
	runningSeconds float64
	// depths are the hub's queue depth for the target as each sample read
	// it (trainyard_dispatches_queue_limit; none before that gauge).
	depths []float64
	mu     sync.Mutex
}

type fillJob struct {
	submitted, started, ended time.Time
}

func (f *fill) window() time.Duration { return f.last.Sub(f.start) }

// mean is the running jobs averaged over the window, from Slurm's times.
func (f *fill) mean() float64 {
	spans := make([]span, 0, len(f.jobs))
	for _, j := range f.jobs {
		spans = append(spans, span{start: j.started, end: j.ended})
	}
	return meanRunning(spans, f.start, f.last)
}

// fillRound waits for an idle cluster, submits n jobs named prefix<i>
// with submit (8 at a time) and reads the job list until all started.
func fillRound(b *testing.B, c *slurm.Client, slots, n int, prefix string, load *agentLoad, submit func(name string) error) *fill {
	waitIdle(b, c)
	f := &fill{slots: slots, jobs: map[string]*fillJob{}, start: time.Now()}
	for i := 0; i < n; i++ {
		f.jobs[prefix+strconv.Itoa(i)] = &fillJob{}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		parallel(b, n, func(i int) error {
			name := prefix + strconv.Itoa(i)
			f.mu.Lock()
			f.jobs[name].submitted = time.Now()
			f.mu.Unlock()
			return submit(name)
		})
	}()
	deadline, last, started := time.Now().Add(10*time.Minute), time.Now(), 0
	for started < n {
		if time.Now().After(deadline) {
			b.Fatalf("fill round %s: %d of %d started in 10 minutes", prefix, started, n)
		}
		time.Sleep(time.Until(last.Add(fillSample)))
		jobs, err := c.Jobs(context.Background())
		if err != nil {
			continue
		}
		now := time.Now()
		dt := now.Sub(last).Seconds()
		last = now
		running, pending, completing, unseen := 0, 0, 0, 0
		started = 0
		f.mu.Lock()
		for i := range jobs {
			j := &jobs[i]
			if !strings.HasPrefix(j.Name, prefix) {
				continue
			}
			// A TrainJob's Slurm job is named after it, with a suffix.
			name := j.Name
			if k := strings.Index(name[len(prefix):], "-"); k >= 0 {
				name = name[:len(prefix)+k]
			}
			fj := f.jobs[name]
			if fj == nil {
				continue
			}
			st := slurm.StatusOf(j)
			switch {
			case st.Phase == v1alpha1.DispatchSubmitted:
				pending++
				if j.StateReason == "" || j.StateReason == "None" {
					unseen++
				}
				continue
			case st.Phase == v1alpha1.DispatchRunning:
				running++
			case st.CompletionTime != nil:
				fj.ended = st.CompletionTime.Time
			}
			if slices.Contains(j.JobState, "COMPLETING") {
				completing++
			}
			if st.StartTime != nil {
				fj.started = st.StartTime.Time
				f.last = later(f.last, fj.started)
			}
			started++
		}
		f.mu.Unlock()
		if load != nil {
			load.sample(running)
			if d, ok := gaugeValue("trainyard_dispatches_queue_limit", map[string]string{"target": "hpc"}); ok {
				f.depths = append(f.depths, d)
			}
		}
		f.runningSeconds += float64(running) * dt
		idle := float64(max(slots-running, 0)) * dt
		if idle > 0 && completing > 0 {
			f.completing += idle
		}
		if pending > 0 {
			f.idlePending += idle
			if unseen > 0 {
				f.afterSubmit += idle
			}
		} else {
			f.idleStarved += idle
		}
	}
	<-done
	return f
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// p is the start-latency quantile q: from the submit call to Slurm's
// start time.
func (f *fill) p(q float64) string {
	var d []float64
	for _, j := range f.jobs {
		if !j.started.IsZero() {
			d = append(d, j.started.Sub(j.submitted).Seconds())
		}
	}
	return secondsQuantile(d, q)
}

// cells: what, jobs, seconds to the last start, jobs started/s, and the
// fill ratio to raw (the mean running over raw's).
func (f *fill) cells(what string, raw ...*fill) []string {
	var rawMean []float64
	for _, r := range raw {
		rawMean = append(rawMean, r.mean())
	}
	return fillCells(what, len(f.jobs), f.window(), f.mean(), rawMean...)
}

// fillCells are a fill round's first cells: what, jobs, seconds to the
// last start, jobs started/s, and, given raw's mean, the fill ratio.
func fillCells(what string, n int, window time.Duration, mean float64, rawMean ...float64) []string {
	ratio := ""
	if len(rawMean) > 0 {
		ratio = fmt.Sprintf("fill %.2f", mean/rawMean[0])
	}
	w := window.Seconds()
	return []string{what, strconv.Itoa(n), fmt.Sprintf("%.1f", w), fmt.Sprintf("%.1f", float64(n)/w), ratio}
}

// gaugeValue reads one gauge of the process's controller-runtime
// registry, where the in-process hub's metrics live.
func gaugeValue(name string, labels map[string]string) (float64, bool) {
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return 0, false
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if matches(m, labels) {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// notes: the mean running and where the idle slot-time went (as sampled,
// so their sum is only close to the idle share the mean implies).
func (f *fill) notes() string {
	total := float64(f.slots) * f.window().Seconds()
	out := fmt.Sprintf("%.1f of %d running on average (%.1f as sampled); idle slot-time %.0f%% with jobs pending in slurmctld "+
		"(%.0f%% with one not yet scheduled since its submit), %.0f%% with none pending, %.0f%% with a job completing",
		f.mean(), f.slots, f.runningSeconds/f.window().Seconds(), 100*f.idlePending/total, 100*f.afterSubmit/total, 100*f.idleStarved/total, 100*f.completing/total)
	if len(f.depths) > 0 {
		sum, top := 0.0, 0.0
		for _, d := range f.depths {
			sum, top = sum+d, max(top, d)
		}
		out += fmt.Sprintf("; hub queue depth mean %.1f, max %.0f", sum/float64(len(f.depths)), top)
	}
	return out
}

// pipeline is where a TrainJob's time went after the hub placed it, as
// medians over the round: Dispatch written to the agent reporting the
// Slurm job submitted, and the job first seen running in Slurm to the
// agent reporting it running (its poll and status write).
func pipeline(b *testing.B, fleet *kube.Fleet, st *stages, f *fill) string {
	var list trainer.TrainJobList
	if err := fleet.Hub.Client.List(context.Background(), &list, client.InNamespace("bench")); err != nil {
		b.Fatal(err)
	}
	lasts := st.lasts()
	st.mu.Lock()
	defer st.mu.Unlock()
	var toSubmit, toReport, toDispatch []float64
	for _, tj := range list.Items {
		at := st.at[string(tj.UID)]
		if at == nil {
			continue
		}
		if d, s := at["dispatch"], at["submitted"]; !d.IsZero() && !s.IsZero() {
			toSubmit = append(toSubmit, s.Sub(d).Seconds())
		}
		if q, d := at["quota"], at["dispatch"]; !q.IsZero() && !d.IsZero() {
			toDispatch = append(toDispatch, d.Sub(q).Seconds())
		}
		if j := f.jobs[tj.Name]; j != nil && !j.started.IsZero() && !at["running"].IsZero() {
			toReport = append(toReport, at["running"].Sub(j.started).Seconds())
		}
	}
	return fmt.Sprintf("medians: quota to Dispatch %s (waiting on the hub included), Dispatch to submitted %s, "+
		"running in Slurm to reported %s; %s", median(toDispatch), median(toSubmit), median(toReport), lasts)
}

func median(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	sort.Float64s(v)
	return fmt.Sprintf("%.2f s", v[len(v)/2])
}

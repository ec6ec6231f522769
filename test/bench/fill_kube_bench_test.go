package bench

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	jobset "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// runForAnnotation sets how long the harness's kwok keeps a pod Running
// before it finishes (cmd/trainyard/sandbox/fleet/kwok-stages.yaml).
const runForAnnotation = "kwok.trainyard.dev/run-for"

// fillProfile is how much of the TrainJob round the CPU profiles of
// trainyard's processes cover, from its first create.
const fillProfile = 90 * time.Second

// BenchmarkFillKubernetes is BenchmarkFill on a Kubernetes spoke: a
// backlog of n one-GPU jobs whose pods run a fixed time
// (TRAINYARD_BENCH_FILL_JOBS, default 200; TRAINYARD_BENCH_FILL_SECONDS,
// default 10) on one spoke of TRAINYARD_BENCH_FILL_NODES (default 2)
// 8-GPU kwok nodes, so that the spoke, not the machine, bounds both
// rounds: first as raw JobSets created on the spoke, then, once it is
// idle, as TrainJobs through the hub's Kueue and trainyard's hub and agent,
// which run as processes of their own so that their CPU time is theirs.
// Both rounds clock the pods on a watch of the spoke, and the window in
// which the backlog waits is from the first create to the last pod's
// start.
//
// It prints `fill: kubernetes <ratio>`, the mean number of running pods
// under trainyard over that under raw JobSets, a row per round with its
// start latency (create to pod Running) p50 and p95, and the TrainJob
// round's cost per job: hub API requests by verb and resource and CPU
// seconds per process group.
func BenchmarkFillKubernetes(b *testing.B) {
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	n, run := envInt("TRAINYARD_BENCH_FILL_JOBS", 200), envInt("TRAINYARD_BENCH_FILL_SECONDS", 10)
	nodes := envInt("TRAINYARD_BENCH_FILL_NODES", 2)
	slots := nodes * gpusPerNode
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, bins := buildControllers(ctx, b, "fill-kubernetes")
	fleet := startClusters(b, kube.HubOptions(filepath.Join(dir, "hub"), true), kube.SpokeOptions("spoke1", filepath.Join(dir, "spoke1")))
	defer func() { _ = fleet.Stop() }()
	spoke := fleet.Spokes[0]
	runFor := fmt.Sprintf("%ds", run)
	prepareFleet(ctx, b, fleet, nodes, tytesting.MakeClusterTrainingRuntime("bench").PodAnnotation(runForAnnotation, runFor).Obj())
	hub, trainyardProcs, stop := startControllerProcs(ctx, b, fleet, bins, dir)
	defer stop()
	waitFreeGPUs(b, fleet.Hub, 1, int64(slots))
	// The hub's histograms are read once before and once after the round,
	// not sampled: each /metrics read costs the hub CPU the round counts
	// as trainyard's, and a Prometheus scrapes every 15 to 30 s, not every
	// second.
	costNow := func() hubCost {
		s, err := hub.scrape(ctx)
		if err != nil {
			b.Fatalf("reading the hub's metrics: %v", err)
		}
		c, err := hub.withAgentPasses(ctx, s.cost)
		if err != nil {
			b.Fatalf("reading the agents' metrics: %v", err)
		}
		return c
	}
	clock := watchPods(ctx, b, spoke)

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ns := fmt.Sprintf("fill-raw-%d", i)
		if err := spoke.EnsureNamespace(ctx, ns); err != nil {
			b.Fatal(err)
		}
		waitSpokeIdle(b, spoke)
		rawCPU := newCPUMeter(fleet, trainyardProcs...)
		raw := kubeFillRound(b, clock, slots, n, func(j int, r createRecorder) error {
			js := rawJobSet(ns, fmt.Sprintf("fraw-%d-%d", i, j))
			js.Spec.ReplicatedJobs[0].Template.Spec.Template.Annotations[runForAnnotation] = runFor
			t := time.Now()
			if err := spoke.Client.Create(ctx, js); err != nil {
				return err
			}
			r.create(js.Name, t)
			return nil
		})
		rawCosts := rawCPU.cell(n)
		deleteJobSets(b, spoke, ns)

		waitSpokeIdle(b, spoke)
		waitFreeGPUs(b, fleet.Hub, 1, int64(slots))
		// When the last job passed each step on the hub says which paced it.
		st := newStages()
		watchCtx, stopWatch := context.WithCancel(ctx)
		st.watch(watchCtx, b, fleet)
		api, cpu, before := startAPIMeter(fleet.Hub.Config), newCPUMeter(fleet, trainyardProcs...), costNow()
		// Where trainyard's CPU goes: go tool pprof -top <file>.
		profiled := hub.profileAll(ctx, b, dir, "fill", fillProfile)
		ty := kubeFillRound(b, clock, slots, n, func(j int, r createRecorder) error {
			tj := tytesting.MakeTrainJob(fmt.Sprintf("fty-%d-%d", i, j), sideBySideNS).Queue("lq").
				RuntimeRef(trainer.ClusterTrainingRuntimeKind, "bench").NumNodes(1).GPUsPerNode(1).Obj()
			return createTimed(ctx, fleet.Hub.Client, tj, r)
		})
		after, lasts := costNow(), st.lasts()
		profiled()
		stopWatch()
		waitQueueDrained(b, fleet.Hub)
		costs, reqs := cpu.cell(n), hubRequests(b, api)

		ratio := ty.mean() / raw.mean()
		fmt.Printf("fill: kubernetes %.2f\n", ratio)
		b.ReportMetric(ratio, "fill-kubernetes")
		b.ReportMetric(reqs.writes(n), "hub-writes/job")
		what := fmt.Sprintf("Kubernetes fill, %d jobs of %d s on %d GPUs", n, run, slots)
		row(append(raw.cells(what+": raw JobSets on the spoke"), "", "", "", raw.p(0.5), raw.p(0.95),
			raw.notes()+"; CPU s/job: "+rawCosts)...)
		row(append(append(ty.cells(what+": TrainJobs", raw), costCells(before, after)...), "", ty.p(0.5), ty.p(0.95),
			ty.notes()+"; "+lasts)...)
		costRow("Cost per job: Kubernetes fill, TrainJobs (trainyard as processes)", n, reqs,
			costs+"; reconcile passes per job (hub, and agents as agent/controller): "+passesPerJob(before, after, n))
	}
}

// costRow adds a row of what a round cost per job: hub API requests and
// CPU seconds (cpuMeter.cell).
func costRow(what string, n int, reqs apiRequests, cpu string) {
	row(what, strconv.Itoa(n), "", "", "", "", "", "", "", "", "hub API requests per job: "+reqs.perJob(n)+
		" (WATCH not counted; the bench's own creates included); CPU s/job: "+cpu)
}

// createRecorder is told when each job's first create began.
type createRecorder interface {
	create(key string, t time.Time)
	retried()
}

// podClock clocks the pods of a spoke on a watch: when the pod of each
// job (its TrainJob's UID, or a raw JobSet's name) was first seen Running
// and first seen finished.
type podClock struct {
	mu             sync.Mutex
	running, ended map[string]time.Time
}

// podJob is the job a pod runs for: the TrainJob whose UID its labels
// carry, else its JobSet.
func podJob(p *corev1.Pod) string {
	if uid := p.Labels[v1alpha1.LabelTrainJobUID]; uid != "" {
		return uid
	}
	return p.Labels[jobset.JobSetNameKey]
}

func (c *podClock) observe(p *corev1.Pod, gone bool) {
	job, now := podJob(p), time.Now()
	if job == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	finished := gone || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	if _, ok := c.running[job]; !ok && (p.Status.Phase == corev1.PodRunning || finished && !gone) {
		c.running[job] = now
	}
	if _, ok := c.ended[job]; !ok && finished {
		c.ended[job] = now
	}
}

func (c *podClock) span(job string) (span, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := span{start: c.running[job], end: c.ended[job]}
	return s, !s.start.IsZero()
}

func watchPods(ctx context.Context, b *testing.B, spoke *kube.Cluster) *podClock {
	clock := &podClock{running: map[string]time.Time{}, ended: map[string]time.Time{}}
	c, err := cache.New(spoke.Config, cache.Options{Scheme: kube.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	inf, err := c.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { observePod(clock, o, false) },
		UpdateFunc: func(_, o any) { observePod(clock, o, false) },
		DeleteFunc: func(o any) { observePod(clock, o, true) },
	}); err != nil {
		b.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		b.Fatal("pod watch did not sync")
	}
	return clock
}

func observePod(c *podClock, o any, gone bool) {
	if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	if p, ok := o.(*corev1.Pod); ok {
		c.observe(p, gone)
	}
}

// kubeFill is one round on a spoke: when each job was created, and its
// pod's span as the clock saw it.
type kubeFill struct {
	slots     int
	mu        sync.Mutex
	submitted map[string]time.Time
	spans     map[string]span
	start     time.Time
	last      time.Time // the last pod's start
	retries   int
}

func (f *kubeFill) create(key string, t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.submitted[key] = t
}

func (f *kubeFill) retried() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.retries++
}

// kubeFillRound creates n jobs with submit (8 at a time) and waits until
// the pod of each ran, then reads their spans.
func kubeFillRound(b *testing.B, clock *podClock, slots, n int, submit func(i int, r createRecorder) error) *kubeFill {
	f := &kubeFill{slots: slots, submitted: map[string]time.Time{}, spans: map[string]span{}, start: time.Now()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		parallel(b, n, func(i int) error { return submit(i, f) })
	}()
	waitFor(b, "fill round pods running", func() (int, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		for job := range f.submitted {
			if s, ok := clock.span(job); ok {
				f.spans[job] = s
				f.last = later(f.last, s.start)
			}
		}
		return len(f.spans), nil
	}, n)
	<-done
	// Spans that end later than the last start still count up to it; ends
	// seen since the wait read them are taken as well.
	for job := range f.spans {
		f.spans[job], _ = clock.span(job)
	}
	return f
}

func (f *kubeFill) window() time.Duration { return f.last.Sub(f.start) }

func (f *kubeFill) mean() float64 {
	spans := make([]span, 0, len(f.spans))
	for _, s := range f.spans {
		spans = append(spans, s)
	}
	return meanRunning(spans, f.start, f.last)
}

// p is the start-latency quantile q: from the create call to the pod seen
// Running.
func (f *kubeFill) p(q float64) string {
	var d []float64
	for job, s := range f.spans {
		if t, ok := f.submitted[job]; ok {
			d = append(d, s.start.Sub(t).Seconds())
		}
	}
	return secondsQuantile(d, q)
}

// cells: what, jobs, seconds to the last start, pods started/s, and the
// fill ratio to raw's.
func (f *kubeFill) cells(what string, raw ...*kubeFill) []string {
	var rawMean []float64
	for _, r := range raw {
		rawMean = append(rawMean, r.mean())
	}
	return fillCells(what, len(f.spans), f.window(), f.mean(), rawMean...)
}

func (f *kubeFill) notes() string {
	out := fmt.Sprintf("%.1f of %d GPUs busy on average", f.mean(), f.slots)
	if f.retries > 0 {
		out += fmt.Sprintf("; %d creates tried again", f.retries)
	}
	return out
}

// waitSpokeIdle waits until no pod on the spoke is Pending or Running.
func waitSpokeIdle(b *testing.B, spoke *kube.Cluster) {
	waitFor(b, "spoke idle", func() (int, error) {
		var pods corev1.PodList
		if err := spoke.Client.List(context.Background(), &pods, client.InNamespace("")); err != nil {
			return 0, err
		}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodPending || p.Status.Phase == corev1.PodRunning {
				return 0, nil
			}
		}
		return 1, nil
	}, 1)
}

package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	jobset "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	trainyard "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/controllers"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	sandboxfleet "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/harness/procs"
)

// BenchmarkScale holds TRAINYARD_BENCH_SCALE_QUEUED (default 10,000)
// TrainJobs waiting behind as many running as three spokes of
// TRAINYARD_BENCH_SCALE_NODES (default 42) 8-GPU nodes hold (1,008), with
// the hub as its own process: its RSS, its decision and reconcile p99s,
// how many dispatch reconciles one Target status write costs while they
// wait, and decisions/s at the start and at the end, while the bench
// completes remote JobSets so that finished Dispatches pile up to 10,000.
// The spokes run no JobSet controller and no pods: the bench plays the
// execution system by writing each remote JobSet's Completed condition.
func BenchmarkScale(b *testing.B) {
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	queued := envInt("TRAINYARD_BENCH_SCALE_QUEUED", 10000)
	nodes := envInt("TRAINYARD_BENCH_SCALE_NODES", 42)
	// A round fails when the hub dispatches nothing for this long; on a
	// slow machine it just takes longer.
	stall := time.Duration(envInt("TRAINYARD_BENCH_SCALE_STALL_MINUTES", 5)) * time.Minute
	for i := 0; i < b.N; i++ {
		scaleRound(b, nodes, queued, stall)
	}
}

const scaleWindow = 1000

func scaleRound(b *testing.B, nodes, queued int, stall time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	began := time.Now()
	dir, bins := buildControllers(ctx, b, "scale")
	var spokes []kube.Options
	for i := 1; i <= sideBySideSpokes; i++ {
		name := fmt.Sprintf("spoke%d", i)
		spokes = append(spokes, kube.Options{Name: name, Dir: filepath.Join(dir, name),
			CRDs: []string{kube.CRDsJobSet, kube.CRDsLWS}, Kwok: true})
	}
	fleet := startClusters(b, kube.HubOptions(filepath.Join(dir, "hub"), true), spokes...)
	defer func() { _ = fleet.Stop() }()
	hub, stop := startScaleControllers(ctx, b, fleet, nodes, bins, dir)
	defer stop()
	slots := sideBySideSpokes * nodes * gpusPerNode
	total := slots + queued

	done := newCompleter(ctx, b, fleet)
	a := newArrivals()
	for _, s := range fleet.Spokes {
		a.watch(ctx, b, s, func(js *jobset.JobSet) string { return js.Labels[v1alpha1.LabelTrainJobUID] })
	}
	rec := hub.record(ctx, time.Second)

	// Fill: every job is created; the first slots are placed, the rest wait.
	t0 := time.Now()
	parallel(b, total, func(i int) error {
		tj := tytesting.MakeTrainJob("scale-"+strconv.Itoa(i), sideBySideNS).Queue("lq").
			RuntimeRef(trainer.ClusterTrainingRuntimeKind, "bench").NumNodes(1).GPUsPerNode(1).Obj()
		return createTimed(ctx, fleet.Hub.Client, tj, a)
	})
	created := time.Since(t0)
	diagnose := func() string { return stallDiagnosis(ctx, fleet.Hub, hub) }
	rec.waitDispatched(b, slots, stall, diagnose)
	filled := rec.last()
	defer hub.profile(ctx, b, filepath.Join(dir, "hub-filling.pprof"), time.Minute)()
	waitQuotaReserved(b, fleet.Hub, total)
	quiet := fanOut(ctx, b, fleet.Hub, rec, time.Minute)

	// Drain: complete what runs, so the waiting jobs follow and finished
	// Dispatches pile up.
	drainStart := time.Now()
	done.enable()
	defer hub.profile(ctx, b, filepath.Join(dir, "hub-draining.pprof"), time.Minute)()
	rec.waitDispatched(b, total, stall, diagnose)
	rec.stop()
	windows := rec.windows(t0, slots, scaleWindow, drainStart)
	scaleRows(scaleReport{total: total, slots: slots, queued: queued, created: created, filled: filled,
		quiet: quiet, windows: windows, peak: rec.peakRSS(), end: rec.last(), completed: done.count(),
		took: time.Since(began)})
}

// buildControllers builds trainyard-hub and trainyard-agent from cmd/
// into a folder for one round's logs and binaries (under
// TRAINYARD_ARTIFACTS as name, else a temporary one), and returns it with
// the binaries by name.
func buildControllers(ctx context.Context, b *testing.B, name string) (string, map[string]string) {
	dir := artifacts(name)
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "trainyard-"+name+"-"); err != nil {
			b.Fatal(err)
		}
	}
	bins, err := procs.Build(ctx, filepath.Join(dir, "bin"), "./cmd/trainyard-hub", "./cmd/trainyard-agent")
	if err != nil {
		b.Fatal(err)
	}
	return dir, bins
}

// startScaleControllers sets up the queue, runtime and nodes, registers the
// spokes, and runs the hub and one agent per spoke as processes built from
// cmd/, waiting until every Target reports its GPUs free. stop ends them.
func startScaleControllers(ctx context.Context, b *testing.B, fleet *kube.Fleet, nodes int, bins map[string]string,
	dir string) (hp *hubProcess, stop func()) {
	prepareFleet(ctx, b, fleet, nodes, tytesting.MakeClusterTrainingRuntime("bench").Obj())
	hp, _, stop = startControllerProcs(ctx, b, fleet, bins, dir)
	waitFreeGPUs(b, fleet.Hub, len(fleet.Spokes), int64(nodes*gpusPerNode))
	return hp, stop
}

// startControllerProcs registers the fleet's spokes and runs the hub and
// one agent per spoke as processes of bins (trainyard-hub and
// trainyard-agent, procs.Build), logging to dir. It returns the hub, every
// process it started, and stop, which ends them.
func startControllerProcs(ctx context.Context, b *testing.B, fleet *kube.Fleet, bins map[string]string,
	dir string) (hp *hubProcess, all []*procs.Process, stop func()) {
	reg, err := trainyard.Register(ctx, fleet, trainyard.Options{Flavor: "gpu"})
	if err != nil {
		b.Fatal(err)
	}
	kc := func(name string) string { return filepath.Join(dir, name+".kubeconfig") }
	if err := procs.WriteKubeconfig(kc("hub"), reg.HubConfig); err != nil {
		b.Fatal(err)
	}
	h := reg.HubOptions
	pprofPort, err := sandboxfleet.FreePort()
	if err != nil {
		b.Fatal(err)
	}
	pprofAddr := "127.0.0.1:" + strconv.Itoa(pprofPort)
	hp = &hubProcess{url: reg.MetricsURL, pprof: "http://" + pprofAddr + "/debug/pprof",
		Process: procs.New("hub", bins["trainyard-hub"], filepath.Join(dir, "hub.log"),
			"--kubeconfig="+kc("hub"), "--leader-elect=false", "--metrics-bind-address="+h.MetricsAddr,
			"--pprof-bind-address="+pprofAddr,
			"--health-probe-bind-address=0", "--webhook-host="+h.WebhookHost, "--webhook-port="+strconv.Itoa(h.WebhookPort),
			"--webhook-cert-dir="+h.WebhookCertDir)}
	all = []*procs.Process{hp.Process}
	hp.agentsPprof, hp.agentsMetrics = map[string]string{}, map[string]string{}
	for _, s := range fleet.Spokes {
		if err := procs.WriteKubeconfig(kc("agent-"+s.Name), reg.AgentConfigs[s.Name]); err != nil {
			b.Fatal(err)
		}
		port, err := sandboxfleet.FreePort()
		if err != nil {
			b.Fatal(err)
		}
		metricsPort, err := sandboxfleet.FreePort()
		if err != nil {
			b.Fatal(err)
		}
		addr, metricsAddr := "127.0.0.1:"+strconv.Itoa(port), "127.0.0.1:"+strconv.Itoa(metricsPort)
		hp.agentsPprof["agent-"+s.Name] = "http://" + addr + "/debug/pprof"
		hp.agentsMetrics["agent-"+s.Name] = "http://" + metricsAddr + "/metrics"
		all = append(all, procs.New("agent-"+s.Name, bins["trainyard-agent"], filepath.Join(dir, "agent-"+s.Name+".log"),
			"--target="+s.Name, "--backend=kubernetes", "--hub-kubeconfig="+kc("agent-"+s.Name),
			"--spoke-kubeconfig="+s.Kubeconfig, "--leader-elect=false", "--metrics-bind-address="+metricsAddr, "--health-probe-bind-address=0",
			"--pprof-bind-address="+addr))
	}
	stop = func() {
		for _, p := range all {
			p.Stop(10 * time.Second)
		}
	}
	for _, p := range all {
		if err := p.Start(); err != nil {
			stop()
			b.Fatal(err)
		}
	}
	return hp, all, stop
}

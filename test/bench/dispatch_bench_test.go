// Package bench measures trainyard's dispatch throughput on the harness and
// compares it with the raw rate of the same spoke, in one run:
//
//	make bench   (go test -run '^$' -bench . -benchtime 1x ./test/bench/)
//
// TRAINYARD_BENCH_JOBS sets the number of jobs (default 200).
package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	jobset "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	trainyard "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/controllers"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/internal/metrics"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

const (
	nodesPerSpoke = 25
	gpusPerNode   = 8
	// Each TrainJob asks for 2 GPUs: 200 jobs need 400 GPUs, more than one
	// spoke's 200, so best-fit placement has to use both spokes. A raw
	// JobSet asks for 1, so 200 fit on the one spoke they run on; the
	// scheduling work per pod is the same.
	gpusPerTrainJob = 2
	gpusPerRawJob   = 1
	creators        = 8
)

func BenchmarkDispatchThroughput(b *testing.B) {
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	n := 200
	if v, err := strconv.Atoi(os.Getenv("TRAINYARD_BENCH_JOBS")); err == nil && v > 0 {
		n = v
	}
	ctx := context.Background()
	fleet, err := kube.StartFleet(ctx, kube.FleetOptions{Spokes: 2, Dir: os.Getenv("TRAINYARD_ARTIFACTS")})
	if err != nil {
		b.Fatal(err)
	}
	defer fleet.Stop()
	for _, s := range fleet.Spokes {
		var nodes []kube.NodeSpec
		for i := 0; i < nodesPerSpoke; i++ {
			nodes = append(nodes, kube.NodeSpec{Name: fmt.Sprintf("%s-n%02d", s.Name, i), GPUs: gpusPerNode})
		}
		if err := s.AddKwokNodes(ctx, nodes...); err != nil {
			b.Fatal(err)
		}
	}
	if err := trainyard.SetUpQueue(ctx, fleet.Hub, trainyard.Queue{
		ClusterQueue: "cq", Namespace: "bench", LocalQueue: "lq", Flavor: "gpu", GPUs: "10000",
	}); err != nil {
		b.Fatal(err)
	}
	rt := tytesting.MakeClusterTrainingRuntime("bench").Toleration(kube.KwokToleration).
		PodAnnotation("kwok.trainyard.dev/run-for", "1h").Obj()
	if err := fleet.Hub.Client.Create(ctx, rt); err != nil {
		b.Fatal(err)
	}
	controllers, err := trainyard.Start(ctx, fleet, trainyard.Options{Flavor: "gpu"})
	if err != nil {
		b.Fatal(err)
	}
	defer controllers.Stop()
	waitTargetsReady(b, fleet)

	history := 2000
	if v, err := strconv.Atoi(os.Getenv("TRAINYARD_BENCH_HISTORY")); err == nil && v >= 0 {
		history = v
	}

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		raw, rawCPU := rawJobSets(b, fleet, fleet.Spokes[0], n, i)
		before := readHubCost()
		ty, load, notes := trainJobs(b, fleet, n, fmt.Sprintf("ty-%d", i))
		cost := append(before.cells(), load, "", "", notes)
		b.ReportMetric(float64(n)/raw.Seconds(), "raw-jobsets/s")
		b.ReportMetric(float64(n)/ty.Seconds(), "trainjobs/s")
		b.ReportMetric(raw.Seconds()/ty.Seconds(), "ratio")
		row(append(rateCells("Kubernetes: raw JobSets on one spoke", n, raw), "", "", "", "", "", "CPU s/job: "+rawCPU)...)
		row(append(rateCells("Kubernetes: TrainJobs over 2 spokes", n, ty, raw), cost...)...)

		// The same again with finished Dispatches in the hub's cache:
		// the cost of a decision must not grow with history.
		template := clearTrainJobs(b, fleet)
		addHistory(b, fleet, template, history, i)
		before = readHubCost()
		withHistory, load, notes := trainJobs(b, fleet, n, fmt.Sprintf("hist-%d", i))
		b.ReportMetric(float64(n)/withHistory.Seconds(), "trainjobs-with-history/s")
		row(append(rateCells(fmt.Sprintf("Kubernetes: same, %d finished Dispatches cached", history), n, withHistory, raw),
			append(before.cells(), load, "", "", notes)...)...)
		if i+1 < b.N {
			clearTrainJobs(b, fleet)
		}
	}
}

// rateCells are a row's first cells: what, jobs, seconds, jobs/s and,
// given the raw time, the ratio raw/took.
func rateCells(what string, n int, took time.Duration, raw ...time.Duration) []string {
	ratio := ""
	if len(raw) > 0 {
		ratio = fmt.Sprintf("%.2f", raw[0].Seconds()/took.Seconds())
	}
	return []string{what, strconv.Itoa(n), fmt.Sprintf("%.1f", took.Seconds()), fmt.Sprintf("%.1f", float64(n)/took.Seconds()), ratio}
}

// clearTrainJobs deletes the TrainJobs of the bench namespace and waits
// until their Dispatches are gone and the spokes report all GPUs free. It
// returns one of the Dispatches as it was, as a template of history.
func clearTrainJobs(b *testing.B, fleet *kube.Fleet) *v1alpha1.Dispatch {
	ctx, c := context.Background(), fleet.Hub.Client
	var list v1alpha1.DispatchList
	if err := c.List(ctx, &list); err != nil {
		b.Fatal(err)
	}
	var template *v1alpha1.Dispatch
	for i := range list.Items {
		if list.Items[i].Spec.TargetName != historyTarget {
			template = list.Items[i].DeepCopy()
		}
	}
	if err := c.DeleteAllOf(ctx, &trainer.TrainJob{}, client.InNamespace("bench")); err != nil {
		b.Fatal(err)
	}
	waitFor(b, "trainyard dispatches gone", func() (int, error) {
		var list v1alpha1.DispatchList
		if err := c.List(ctx, &list); err != nil {
			return 0, err
		}
		left := 0
		for _, d := range list.Items {
			if d.Spec.TargetName != historyTarget {
				left++
			}
		}
		return -left, nil
	}, 0)
	waitTargetsReady(b, fleet)
	return template
}

// historyTarget names the Target of the history Dispatches: none exists,
// and no agent reads their namespace.
const historyTarget = "history"

// addHistory writes n finished Dispatches, copies of template (runtime and
// TrainJob snapshots included), each of its own Workload.
func addHistory(b *testing.B, fleet *kube.Fleet, template *v1alpha1.Dispatch, n, round int) {
	if template == nil || n == 0 {
		return
	}
	ctx, c := context.Background(), fleet.Hub.Client
	ns := fmt.Sprintf("history-%d", round)
	if err := fleet.Hub.EnsureNamespace(ctx, ns); err != nil {
		b.Fatal(err)
	}
	parallel(b, n, func(i int) error {
		d := &v1alpha1.Dispatch{Spec: *template.Spec.DeepCopy()}
		d.Name, d.Namespace = fmt.Sprintf("hist-%d", i), ns
		uid := fmt.Sprintf("history-%d-%d", round, i)
		d.Labels = map[string]string{v1alpha1.LabelWorkloadUID: uid, v1alpha1.LabelTarget: historyTarget}
		d.Annotations = template.Annotations
		d.Spec.TargetName = historyTarget
		d.Spec.Workload = v1alpha1.WorkloadReference{Namespace: ns, Name: d.Name, UID: types.UID(uid)}
		if err := c.Create(ctx, d); err != nil {
			return err
		}
		d.Status = *template.Status.DeepCopy()
		d.Status.Phase = v1alpha1.DispatchSucceeded
		return c.Status().Update(ctx, d)
	})
}

// rawJobSets creates n one-pod JobSets on spoke directly and returns the
// time until every one has a ready pod; then it deletes them and waits for
// their pods to go, so the trainyard run finds the spoke empty.
func rawJobSets(b *testing.B, fleet *kube.Fleet, spoke *kube.Cluster, n, round int) (time.Duration, string) {
	ctx, c := context.Background(), spoke.Client
	ns := fmt.Sprintf("raw-%d", round)
	if err := spoke.EnsureNamespace(ctx, ns); err != nil {
		b.Fatal(err)
	}
	t0, cpu := time.Now(), newCPUMeter(fleet)
	parallel(b, n, func(i int) error { return c.Create(ctx, rawJobSet(ns, fmt.Sprintf("raw-%d", i))) })
	waitFor(b, "raw JobSets running", func() (int, error) {
		var list jobset.JobSetList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return 0, err
		}
		ready := 0
		for _, js := range list.Items {
			for _, r := range js.Status.ReplicatedJobsStatus {
				if r.Ready > 0 {
					ready++
				}
			}
		}
		return ready, nil
	}, n)
	d, cpuCell := time.Since(t0), cpu.cell(n)
	deleteJobSets(b, spoke, ns)
	return d, cpuCell
}

// deleteJobSets deletes the JobSets of namespace ns on spoke and waits
// until their pods are gone.
func deleteJobSets(b *testing.B, spoke *kube.Cluster, ns string) {
	ctx, c := context.Background(), spoke.Client
	if err := c.DeleteAllOf(ctx, &jobset.JobSet{}, client.InNamespace(ns), client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		b.Fatal(err)
	}
	waitFor(b, "raw pods gone", func() (int, error) {
		var pods corev1.PodList
		err := c.List(ctx, &pods, client.InNamespace(ns))
		return -len(pods.Items), err
	}, 0)
}

func rawJobSet(ns, name string) *jobset.JobSet {
	gpu := *resource.NewQuantity(gpusPerRawJob, resource.DecimalSI)
	return &jobset.JobSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: jobset.JobSetSpec{ReplicatedJobs: []jobset.ReplicatedJob{{
			Name: "node", Replicas: 1,
			Template: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
				Parallelism: ptr.To[int32](1), Completions: ptr.To[int32](1),
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"kwok.trainyard.dev/run-for": "1h"}},
					Spec: corev1.PodSpec{
						RestartPolicy: corev1.RestartPolicyNever,
						Tolerations:   []corev1.Toleration{kube.KwokToleration},
						Containers: []corev1.Container{{Name: "node", Image: "registry.example/trainer:latest",
							Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{kube.GPUResource: gpu}, Limits: corev1.ResourceList{kube.GPUResource: gpu}}}},
					},
				},
			}},
		}}},
	}
}

// trainJobs submits n TrainJobs to the hub and returns the time until every
// one's Dispatch reports its remote work Running, the agents' load on the
// spokes' API servers meanwhile, and notes: the CPU time per job of the
// fleet's parts and when the last job passed each step.
func trainJobs(b *testing.B, fleet *kube.Fleet, n int, prefix string) (time.Duration, string, string) {
	ctx, c := context.Background(), fleet.Hub.Client
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	st := newStages()
	st.watch(watchCtx, b, fleet)
	t0, cpu := time.Now(), newCPUMeter(fleet)
	load := startAgentLoad(metrics.SystemSpoke)
	parallel(b, n, func(i int) error {
		return createTrainJob(ctx, c, tytesting.MakeTrainJob(fmt.Sprintf("%s-%d", prefix, i), "bench").Queue("lq").
			RuntimeRef(trainer.ClusterTrainingRuntimeKind, "bench").NumNodes(1).GPUsPerNode(gpusPerTrainJob).Obj())
	})
	perTarget := map[string]int{}
	waitFor(b, "trainyard dispatches running", func() (int, error) {
		var list v1alpha1.DispatchList
		if err := c.List(ctx, &list); err != nil {
			return 0, err
		}
		running := 0
		clear(perTarget)
		for _, d := range list.Items {
			if d.Status.Phase == v1alpha1.DispatchRunning {
				running++
				perTarget[d.Spec.TargetName]++
			}
		}
		load.sample(running)
		return running, nil
	}, n)
	d, notes := time.Since(t0), roundNotes(cpu, n, st)
	b.Logf("%s stages: %s", prefix, st.report())
	for target, jobs := range perTarget {
		if jobs*gpusPerTrainJob > nodesPerSpoke*gpusPerNode {
			b.Fatalf("target %s was booked past its GPUs: %d jobs of %d GPUs on %d GPUs", target, jobs, gpusPerTrainJob, nodesPerSpoke*gpusPerNode)
		}
	}
	return d, load.cell(), notes
}

// createTrainJob creates tj, again when the hub's pinning webhook answers
// that the runtime's pinned copy changed under it (concurrent creates of
// jobs of one runtime all touch that copy): it asks the client to retry.
func createTrainJob(ctx context.Context, c client.Client, tj *trainer.TrainJob) error {
	var err error
	for range 20 {
		if err = c.Create(ctx, tj.DeepCopy()); err == nil || !strings.HasSuffix(err.Error(), "; retry") {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

func parallel(b *testing.B, n int, fn func(i int) error) {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int, n)
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	for w := 0; w < creators; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(i); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// waitFor polls count until it reaches want, for at most 10 minutes.
func waitFor(b *testing.B, what string, count func() (int, error), want int) {
	// The deadline moves with progress: at 10,000 jobs Kueue may take
	// longer than any fixed bound, but it never stalls for 10 minutes.
	deadline := time.Now().Add(10 * time.Minute)
	last := 0
	for time.Now().Before(deadline) {
		got, err := count()
		if err == nil && got >= want {
			return
		}
		if got > last {
			deadline = time.Now().Add(10 * time.Minute)
		}
		last = got
		time.Sleep(100 * time.Millisecond)
	}
	b.Fatalf("%s: %d of %d, none more in 10 minutes", what, last, want)
}

func waitTargetsReady(b *testing.B, fleet *kube.Fleet) {
	waitFor(b, "targets reporting free GPUs", func() (int, error) {
		var list v1alpha1.TargetList
		if err := fleet.Hub.Client.List(context.Background(), &list); err != nil {
			return 0, err
		}
		ready := 0
		for _, t := range list.Items {
			if t.Status.FreeGPUs == nodesPerSpoke*gpusPerNode {
				ready++
			}
		}
		return ready, nil
	}, len(fleet.Spokes))
}

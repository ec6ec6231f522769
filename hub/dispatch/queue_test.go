package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueuetesting "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/placement"
	tyt "github.com/trainyard-dev/trainyard/internal/testing"
)

// TestParallelQueueingHonoursDepth: workers deciding at once fill a full
// Slurm cluster's queue exactly to its depth; the other jobs wait on the
// hub, and the queued Dispatches carry the mark that rebuilds the count
// after a restart.
func TestParallelQueueingHonoursDepth(t *testing.T) {
	const depth, jobs = 3, 12
	target := tyt.MakeSlurmTarget("hpc", "h100", "gpu").AgentNamespace("agents").Available().
		FreeGPUsPerNode(1, 0, 0, 0).MaxGPUsPerNode(4).SlurmQueueDepth(depth).Obj()
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(target).Build()
	r := NewReconciler(c, c, nil, clocktesting.NewFakeClock(t0), Options{})
	req := placement.Request{Flavors: []string{"h100"}, PodSets: []placement.PodSet{{Name: "node", Count: 1, GPUsPerPod: 1}}}

	fits, queued := 0, 0
	waited := decideInParallel(t, r, jobs, req, func(wl *kueue.Workload, b booking) {
		switch {
		case b.decision.Queued:
			queued++
			d := buildDispatch(target, wl, &v1alpha1.TrainJobSnapshot{}, &v1alpha1.RuntimeSnapshot{}, req, b.decision, 1)
			if d.Annotations[v1alpha1.AnnotationQueued] != "true" {
				t.Errorf("queued Dispatch lacks %s: %v", v1alpha1.AnnotationQueued, d.Annotations)
			}
		default:
			fits++
		}
	})
	if fits != 1 || queued != depth || waited != jobs-1-depth {
		t.Errorf("%d fit, %d queued, %d wait on the hub; want 1, %d, %d", fits, queued, waited, depth, jobs-1-depth)
	}
}

// TestKubernetesQueueWaitsForSettledRoom: on a full Kubernetes spoke, a
// job of one pod is queued only while nothing sent to fit there is still
// starting (the spoke's status may count its bound pods twice, and "no
// room" may be wrong); once that job runs, the waiting wake and the queue
// fills to the spoke's depth. Jobs of several pods never queue.
func TestKubernetesQueueWaitsForSettledRoom(t *testing.T) {
	const jobs = 6
	target := tyt.MakeKubernetesTarget("gpu-a", "h100").AgentNamespace("agents").Available().
		FreeGPUsPerNode(1, 0).MaxGPUsPerNode(4).Obj()
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(target).Build()
	r := NewReconciler(c, c, nil, clocktesting.NewFakeClock(t0), Options{})
	r.flight.RecordTarget(target)
	onePod := placement.Request{Flavors: []string{"h100"}, PodSets: []placement.PodSet{{Name: "node", Count: 1, GPUsPerPod: 1}}}

	var fit string
	count := func(req placement.Request) (fits, queued, waited int) {
		waited = decideInParallel(t, r, jobs, req, func(_ *kueue.Workload, b booking) {
			if b.decision.Queued {
				queued++
				return
			}
			fits++
			fit = b.key
		})
		return fits, queued, waited
	}
	if fits, queued, waited := count(onePod); fits != 1 || queued != 0 || waited != jobs-1 {
		t.Fatalf("while the job that fit starts: %d fit, %d queued, %d wait; want 1, 0, %d", fits, queued, waited, jobs-1)
	}
	d := tyt.MakeDispatch(fit[len("agents/"):], "agents", "gpu-a").Phase(v1alpha1.DispatchSubmitted).Obj()
	r.flight.Observe(d, 1)
	// The agent saw it running after its reading 1 began: that reading may
	// count its bound pod, as the record does.
	d.Status.Phase, d.Status.StartTime, d.Status.CountedFromReading = v1alpha1.DispatchRunning, &metav1.Time{Time: t0}, 2
	if wake := r.flight.Observe(d, 1); len(wake) == 0 {
		t.Errorf("the job that fit started: woke none, want the line")
	}
	if fits, queued, waited := count(onePod); fits != 0 || queued != 0 || waited != jobs {
		t.Errorf("running, before a reading counts it: %d fit, %d queued, %d wait; want 0, 0, %d", fits, queued, waited, jobs)
	}
	counted := &v1alpha1.Target{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(target), counted); err != nil {
		t.Fatal(err)
	}
	full := tyt.MakeKubernetesTarget("gpu-a", "h100").FreeGPUsPerNode(0, 0).Obj()
	counted.Status.Topology, counted.Status.FreeGPUs, counted.Status.CapacityReading = full.Status.Topology, 0, 2
	if wake := r.flight.RecordTarget(counted); len(wake) == 0 {
		t.Errorf("the reading that counts the running job: woke none, want the line")
	}
	if wake := r.flight.RecordTarget(counted); len(wake) != 0 {
		t.Errorf("the same reading again woke %d, want none", len(wake))
	}
	if err := c.Update(context.Background(), counted); err != nil {
		t.Fatal(err)
	}
	several := placement.Request{Flavors: []string{"h100"}, PodSets: []placement.PodSet{{Name: "node", Count: 2, GPUsPerPod: 1}}}
	if fits, queued, waited := count(several); fits != 0 || queued != 0 || waited != jobs {
		t.Errorf("jobs of two pods: %d fit, %d queued, %d wait; want 0, 0, %d", fits, queued, waited, jobs)
	}
	if fits, queued, waited := count(onePod); fits != 0 || queued != int(v1alpha1.DefaultKubernetesQueueDepth) ||
		waited != jobs-int(v1alpha1.DefaultKubernetesQueueDepth) {
		t.Errorf("once it runs: %d fit, %d queued, %d wait; want 0, %d, %d", fits, queued, waited,
			v1alpha1.DefaultKubernetesQueueDepth, jobs-int(v1alpha1.DefaultKubernetesQueueDepth))
	}
}

// decided numbers the Workloads decideInParallel makes, so that each call
// decides for new ones.
var decided atomic.Int64

// decideInParallel runs one decision per job at once, each for its own
// new Workload, and hands each booking to placed, one at a time. It
// returns how many found no room.
func decideInParallel(t *testing.T, r *Reconciler, jobs int, req placement.Request, placed func(*kueue.Workload, booking)) (waited int) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range jobs {
		i := decided.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			wl := kueuetesting.MakeWorkload(fmt.Sprintf("wl-%d", i), "team-a").UID(types.UID(fmt.Sprint("uid-", i))).Obj()
			b, err := r.chooseAndBook(context.Background(), wl, req, nil, dispatchName(wl, 1))
			mu.Lock()
			defer mu.Unlock()
			var noPlace placementError
			switch {
			case errors.As(err, &noPlace):
				waited++
			case err != nil:
				t.Errorf("chooseAndBook: %v", err)
			default:
				placed(wl, b)
			}
		}()
	}
	wg.Wait()
	return waited
}

package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
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
	if wake := r.flight.Observe(d, 1); len(wake) != 0 {
		t.Errorf("the job that fit started before a reading counts it: woke %d, want none (they would find no room)", len(wake))
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

// TestParallelBookingsNeverOverbook: workers deciding at once book no more
// GPUs than a target has, node by node, and the jobs left over wait.
func TestParallelBookingsNeverOverbook(t *testing.T) {
	const nodes, jobs = 6, 20
	free := make([]int32, nodes)
	for i := range free {
		free[i] = 8
	}
	target := spokeTarget("gpu-a", "h100").AgentNamespace("agents").Available().
		FreeGPUsPerNode(free...).MaxGPUsPerNode(8).Obj()
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(target).Build()
	r := NewReconciler(c, c, nil, clocktesting.NewFakeClock(t0), Options{})
	req := placement.Request{Flavors: []string{"h100"}, PodSets: []placement.PodSet{{Name: "node", Count: 1, GPUsPerPod: 8}}}

	booked := map[string]int64{}
	waited := decideInParallel(t, r, jobs, req, func(_ *kueue.Workload, b booking) {
		for _, res := range b.decision.Reservations() {
			booked[res.Node] += res.GPUs
		}
	})
	if len(booked) != nodes || waited != jobs-nodes {
		t.Errorf("booked nodes %v and %d waiting, want each of %d nodes once and %d waiting", booked, waited, nodes, jobs-nodes)
	}
	for node, n := range booked {
		if n > 8 {
			t.Errorf("node %s booked %d GPUs of 8", node, n)
		}
	}
	if got := len(r.flight.Counts().Waiting); got != jobs-nodes {
		t.Errorf("%d Workloads recorded as waiting, want %d", got, jobs-nodes)
	}
}

func TestRequestOf(t *testing.T) {
	cases := map[string]struct {
		wl   *kueue.Workload
		want placement.Request
	}{
		"counts and GPUs from the spec before admission": {
			wl: kueuetesting.MakeWorkload("wl", "team-a").PodSets(
				*kueuetesting.MakePodSet("node", 2).Request(gpu, "4").Obj(),
			).Obj(),
			want: placement.Request{PodSets: []placement.PodSet{{Name: "node", Count: 2, GPUsPerPod: 4}}},
		},
		"admission counts win over the spec": {
			// Partial admission: Kueue admitted fewer pods than asked.
			wl: kueuetesting.MakeWorkload("wl", "team-a").PodSets(
				*kueuetesting.MakePodSet("launcher", 1).Obj(),
				*kueuetesting.MakePodSet("node", 8).Request(gpu, "8").Obj(),
			).ReserveQuotaAt(kueuetesting.MakeAdmission("cq").PodSets(
				kueuetesting.MakePodSetAssignment("launcher").Flavor(corev1.ResourceCPU, "default").Obj(),
				kueuetesting.MakePodSetAssignment("node").Flavor(gpu, "h100").Count(5).Obj(),
			).Obj(), t0).Obj(),
			want: placement.Request{Flavors: []string{"default", "h100"}, PodSets: []placement.PodSet{
				{Name: "launcher", Count: 1, GPUsPerPod: 0}, {Name: "node", Count: 5, GPUsPerPod: 8},
			}},
		},
		"an assignment without a count keeps the spec's": {
			wl: kueuetesting.MakeWorkload("wl", "team-a").PodSets(
				*kueuetesting.MakePodSet("node", 3).Request(gpu, "1").Obj(),
			).ReserveQuotaAt(&kueue.Admission{ClusterQueue: "cq", PodSetAssignments: []kueue.PodSetAssignment{{
				Name: "node", Flavors: map[corev1.ResourceName]kueue.ResourceFlavorReference{gpu: "a100"},
			}}}, t0).Obj(),
			want: placement.Request{Flavors: []string{"a100"}, PodSets: []placement.PodSet{{Name: "node", Count: 3, GPUsPerPod: 1}}},
		},
		"topology request from Kueue's pod set": {
			wl: kueuetesting.MakeWorkload("wl", "team-a").PodSets(
				*kueuetesting.MakePodSet("node", 4).Request(gpu, "8").RequiredTopologyRequest("rack").Obj(),
			).Obj(),
			want: placement.Request{PodSets: []placement.PodSet{{Name: "node", Count: 4, GPUsPerPod: 8, Required: "rack"}}},
		},
		"topology request from the pod template's annotation": {
			wl: kueuetesting.MakeWorkload("wl", "team-a").PodSets(
				*kueuetesting.MakePodSet("node", 2).Request(gpu, "1").
					Annotations(map[string]string{placement.PreferredTopologyAnnotation: "block"}).Obj(),
			).Obj(),
			want: placement.Request{PodSets: []placement.PodSet{{Name: "node", Count: 2, GPUsPerPod: 1, Preferred: "block"}}},
		},
		"GPUs from limits when there are no requests": {
			wl: kueuetesting.MakeWorkload("wl", "team-a").PodSets(
				*kueuetesting.MakePodSet("node", 1).Containers(gpuContainer("c", "", "2")).Obj(),
			).Obj(),
			want: placement.Request{PodSets: []placement.PodSet{{Name: "node", Count: 1, GPUsPerPod: 2}}},
		},
		"requests win over limits": {
			wl: kueuetesting.MakeWorkload("wl", "team-a").PodSets(
				*kueuetesting.MakePodSet("node", 1).Containers(gpuContainer("c", "2", "4")).Obj(),
			).Obj(),
			want: placement.Request{PodSets: []placement.PodSet{{Name: "node", Count: 1, GPUsPerPod: 2}}},
		},
		"containers add up": {
			wl: kueuetesting.MakeWorkload("wl", "team-a").PodSets(
				*kueuetesting.MakePodSet("node", 2).Containers(
					gpuContainer("trainer", "4", "4"), gpuContainer("helper", "2", ""),
					gpuContainer("sidecar", "", "1"), corev1.Container{Name: "logger"},
				).Obj(),
			).Obj(),
			want: placement.Request{PodSets: []placement.PodSet{{Name: "node", Count: 2, GPUsPerPod: 7}}},
		},
		"flavors of every pod set and resource, once and sorted": {
			wl: kueuetesting.MakeWorkload("wl", "team-a").PodSets(
				*kueuetesting.MakePodSet("a", 1).Obj(),
				*kueuetesting.MakePodSet("b", 1).Obj(),
			).ReserveQuotaAt(kueuetesting.MakeAdmission("cq").PodSets(
				kueuetesting.MakePodSetAssignment("a").Flavor(gpu, "h100").Flavor(corev1.ResourceCPU, "zone-b").Obj(),
				kueuetesting.MakePodSetAssignment("b").Flavor(gpu, "h100").Flavor(corev1.ResourceMemory, "big-mem").Obj(),
			).Obj(), t0).Obj(),
			want: placement.Request{Flavors: []string{"big-mem", "h100", "zone-b"}, PodSets: []placement.PodSet{
				{Name: "a", Count: 1}, {Name: "b", Count: 1},
			}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, requestOf(tc.wl)); diff != "" {
				t.Errorf("requestOf (-want +got):\n%s", diff)
			}
		})
	}
}

package dispatch

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueuetesting "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/placement"
	tyt "github.com/trainyard-dev/trainyard/internal/testing"
)

const gpu = corev1.ResourceName(v1alpha1.GPUResource)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func gpuContainer(name string, requests, limits string) corev1.Container {
	c := corev1.Container{Name: name}
	if requests != "" {
		c.Resources.Requests = corev1.ResourceList{gpu: resource.MustParse(requests)}
	}
	if limits != "" {
		c.Resources.Limits = corev1.ResourceList{gpu: resource.MustParse(limits)}
	}
	return c
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

func TestDispatchName(t *testing.T) {
	wl := func(name, uid string) *kueue.Workload {
		return kueuetesting.MakeWorkload(name, "team-a").UID(types.UID(uid)).Obj()
	}
	id := func(uid string) string {
		sum := sha256.Sum256([]byte(uid))
		return hex.EncodeToString(sum[:])[:8]
	}
	long := strings.Repeat("trainjob-", 30) // 270 characters

	if got, want := dispatchName(wl("trainjob-bert", "u-1"), 1), "trainjob-bert-"+id("u-1")+"-a1"; got != want {
		t.Errorf("dispatchName = %q, want %q", got, want)
	}
	if a, b := dispatchName(wl("x", "u-1"), 2), dispatchName(wl("x", "u-1"), 2); a != b {
		t.Errorf("dispatchName is not stable: %q then %q", a, b)
	}
	distinct := map[string]string{
		"attempt 1":               dispatchName(wl("x", "u-1"), 1),
		"attempt 2":               dispatchName(wl("x", "u-1"), 2),
		"attempt 12":              dispatchName(wl("x", "u-1"), 12),
		"another UID, same name":  dispatchName(wl("x", "u-2"), 1),
		"another UID, attempt 2":  dispatchName(wl("x", "u-2"), 2),
		"a long name":             dispatchName(wl(long, "u-1"), 1),
		"a long name, other UID":  dispatchName(wl(long, "u-2"), 1),
		"a long name, attempt 99": dispatchName(wl(long, "u-1"), 99),
	}
	seen := map[string]string{}
	for what, name := range distinct {
		if other, dup := seen[name]; dup {
			t.Errorf("%s and %s both name %q", what, other, name)
		}
		seen[name] = what
		// A DNS label: remote work carries it as a label value.
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			t.Errorf("%s: %q is not a DNS label: %v", what, name, errs)
		}
	}
	if got := dispatchName(wl(long, "u-1"), 1); !strings.HasPrefix(got, long[:50]) || len(got) != 63 {
		t.Errorf("long name %q (%d bytes): want the start of the Workload name kept, 63 bytes in all", got, len(got))
	}
}

func TestJobsStatus(t *testing.T) {
	cases := map[string]struct {
		replicas []v1alpha1.ReplicaStatus
		want     []trainer.JobStatus
	}{
		"no replicas": {},
		"empty replicas": {
			replicas: []v1alpha1.ReplicaStatus{},
		},
		"one pod set": {
			replicas: []v1alpha1.ReplicaStatus{{Name: "node", Active: 2, Ready: 1, Succeeded: 3, Failed: 4}},
			want: []trainer.JobStatus{{Name: "node", Active: ptr.To[int32](2), Ready: ptr.To[int32](1),
				Succeeded: ptr.To[int32](3), Failed: ptr.To[int32](4), Suspended: ptr.To[int32](0)}},
		},
		"zeros are explicit and order is kept": {
			replicas: []v1alpha1.ReplicaStatus{{Name: "node"}, {Name: "launcher", Active: 1}},
			want: []trainer.JobStatus{
				{Name: "node", Active: ptr.To[int32](0), Ready: ptr.To[int32](0), Succeeded: ptr.To[int32](0), Failed: ptr.To[int32](0), Suspended: ptr.To[int32](0)},
				{Name: "launcher", Active: ptr.To[int32](1), Ready: ptr.To[int32](0), Succeeded: ptr.To[int32](0), Failed: ptr.To[int32](0), Suspended: ptr.To[int32](0)},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, jobsStatus(tc.replicas)); diff != "" {
				t.Errorf("jobsStatus (-want +got):\n%s", diff)
			}
		})
	}
}

// reserved is a Workload holding quota with trainyard's check.
func reserved() *kueuetesting.WorkloadWrapper {
	return kueuetesting.MakeWorkload("wl", "team-a").UID("wl-uid").
		ReserveQuotaAt(kueuetesting.MakeAdmission("cq").Obj(), t0)
}

func liveDispatch(phase v1alpha1.DispatchPhase) *v1alpha1.Dispatch {
	return &v1alpha1.Dispatch{Spec: v1alpha1.DispatchSpec{Attempt: 1, TargetName: "gpu-a"}, Status: v1alpha1.DispatchStatus{Phase: phase}}
}

func TestMustTearDown(t *testing.T) {
	const check = kueue.AdmissionCheckReference("trainyard")
	cases := map[string]struct {
		wl         *kueue.Workload
		check      kueue.AdmissionCheckReference // defaults to check; "-" for none
		checkState kueue.CheckState
		live       *v1alpha1.Dispatch
		want       bool
	}{
		"holding quota, pending, dispatched": {
			wl: reserved().Obj(), checkState: kueue.CheckStatePending, live: liveDispatch(v1alpha1.DispatchPending),
		},
		"holding quota, ready, running": {
			wl: reserved().Obj(), checkState: kueue.CheckStateReady, live: liveDispatch(v1alpha1.DispatchRunning),
		},
		"holding quota before any attempt": {
			wl: reserved().Obj(), checkState: kueue.CheckStatePending,
		},
		"deleted": {
			wl: reserved().Finalizers(v1alpha1.WorkloadFinalizer).DeletionTimestamp(t0).Obj(), checkState: kueue.CheckStateReady,
			live: liveDispatch(v1alpha1.DispatchRunning), want: true,
		},
		"deleted after finishing": {
			wl:   reserved().FinishedAt(t0).Finalizers(v1alpha1.WorkloadFinalizer).DeletionTimestamp(t0).Obj(),
			live: liveDispatch(v1alpha1.DispatchSucceeded), checkState: kueue.CheckStateReady, want: true,
		},
		"the check is no longer on the Workload": {
			wl: reserved().Obj(), check: "-", live: liveDispatch(v1alpha1.DispatchRunning), want: true,
		},
		"finished with its Dispatch final": {
			wl: reserved().FinishedAt(t0).Obj(), checkState: kueue.CheckStateReady, live: liveDispatch(v1alpha1.DispatchSucceeded),
		},
		"finished with its Dispatch failed": {
			wl: reserved().FinishedAt(t0).Obj(), checkState: kueue.CheckStateReady, live: liveDispatch(v1alpha1.DispatchFailed),
		},
		"finished, quota released, Dispatch final": {
			wl: kueuetesting.MakeWorkload("wl", "team-a").FinishedAt(t0).Obj(), checkState: kueue.CheckStateReady,
			live: liveDispatch(v1alpha1.DispatchSucceeded),
		},
		"finished while its Dispatch still runs": {
			wl: reserved().FinishedAt(t0).Obj(), checkState: kueue.CheckStateReady, live: liveDispatch(v1alpha1.DispatchRunning), want: true,
		},
		"finished without a live Dispatch": {
			wl: reserved().FinishedAt(t0).Obj(), checkState: kueue.CheckStateReady, want: true,
		},
		"evicted": {
			wl: reserved().EvictedAt(t0).Obj(), checkState: kueue.CheckStateReady, live: liveDispatch(v1alpha1.DispatchRunning), want: true,
		},
		"quota never reserved": {
			wl: kueuetesting.MakeWorkload("wl", "team-a").Obj(), checkState: kueue.CheckStatePending, want: true,
		},
		"quota released": {
			wl:         reserved().Condition(metav1.Condition{Type: kueue.WorkloadQuotaReserved, Status: metav1.ConditionFalse, Reason: "Pending"}).Obj(),
			checkState: kueue.CheckStatePending, live: liveDispatch(v1alpha1.DispatchRunning), want: true,
		},
		"the check asks for a retry": {
			wl: reserved().Obj(), checkState: kueue.CheckStateRetry, live: liveDispatch(v1alpha1.DispatchRunning), want: true,
		},
		"the check rejected the Workload": {
			wl: reserved().Obj(), checkState: kueue.CheckStateRejected, live: liveDispatch(v1alpha1.DispatchRejected), want: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := &state{wl: tc.wl, check: check, checkState: tc.checkState, live: tc.live}
			switch tc.check {
			case "-":
				s.check = ""
			case "":
			default:
				s.check = tc.check
			}
			if got := (&Reconciler{}).mustTearDown(s); got != tc.want {
				t.Errorf("mustTearDown = %v, want %v", got, tc.want)
			}
		})
	}
}

// withDispatchIndexes registers the Dispatch field indexes on a fake
// client, as IndexDispatches does on the manager's cache.
func withDispatchIndexes(b *fake.ClientBuilder) *fake.ClientBuilder {
	return b.WithIndex(&v1alpha1.Dispatch{}, IndexWorkloadUID, workloadUIDOf).WithIndex(&v1alpha1.Dispatch{}, IndexTarget, targetOf)
}

// spokeTarget is a Kubernetes target that takes no queued jobs, so that a
// test of room and waiting reads what fits now; queue_test.go and the
// inflight package's tests cover the queue.
func spokeTarget(name, flavor string) *tyt.TargetWrapper {
	return tyt.MakeKubernetesTarget(name, flavor).KubernetesQueueDepth(0)
}

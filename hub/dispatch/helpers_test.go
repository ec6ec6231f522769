package dispatch

import (
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueuetesting "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
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

// reserved is a Workload holding quota with trainyard's check.
func reserved() *kueuetesting.WorkloadWrapper {
	return kueuetesting.MakeWorkload("wl", "team-a").UID("wl-uid").
		ReserveQuotaAt(kueuetesting.MakeAdmission("cq").Obj(), t0)
}

func liveDispatch(phase v1alpha1.DispatchPhase) *v1alpha1.Dispatch {
	return &v1alpha1.Dispatch{Spec: v1alpha1.DispatchSpec{Attempt: 1, TargetName: "gpu-a"}, Status: v1alpha1.DispatchStatus{Phase: phase}}
}

// withDispatchIndexes registers the Dispatch field indexes on a fake
// client, as IndexDispatches does on the manager's cache.
func withDispatchIndexes(b *fake.ClientBuilder) *fake.ClientBuilder {
	return b.WithIndex(&v1alpha1.Dispatch{}, IndexWorkloadUID, workloadUIDOf).WithIndex(&v1alpha1.Dispatch{}, IndexTarget, targetOf)
}

// spokeTarget is a Kubernetes target that takes no queued jobs, so that a
// test of room and waiting reads what fits now; choose_target_test.go and
// the inflight package's tests cover the queue.
func spokeTarget(name, flavor string) *tyt.TargetWrapper {
	return tyt.MakeKubernetesTarget(name, flavor).KubernetesQueueDepth(0)
}

func tjOf(name string) *trainer.TrainJob {
	return &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a", UID: "tj-uid"}}
}

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{v1alpha1.AddToScheme, kueue.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

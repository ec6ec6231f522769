package snapshot

import (
	"context"
	"strings"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

func TestGC(t *testing.T) {
	created := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	grace := 10 * time.Minute
	copyOf := func(mutate func(*trainer.TrainingRuntime)) *trainer.TrainingRuntime {
		rt := trainingRuntime("torch-0123456789ab", ns, tytesting.TorchRuntimeSpec(1))
		rt.CreationTimestamp = metav1.NewTime(created)
		rt.Labels = map[string]string{v1alpha1.LabelPinnedRuntime: "true"}
		rt.Annotations = map[string]string{v1alpha1.AnnotationRuntimeHash: "sha256:0123", v1alpha1.AnnotationRuntimeSource: "ClusterTrainingRuntime/torch"}
		if mutate != nil {
			mutate(rt)
		}
		return rt
	}
	user := func(name, runtime string) *trainer.TrainJob {
		return pinnedTo(name, runtime)
	}
	cases := map[string]struct {
		rt          *trainer.TrainingRuntime
		cached      []client.Object // TrainJobs in the cache
		live        []client.Object // TrainJobs only the API server has yet
		now         time.Time
		touchOnGet  bool // the webhook pins a job to the copy right after the collector reads it
		wantDeleted bool
		wantAfter   time.Duration
	}{
		"unreferenced past the grace period: deleted": {
			rt: copyOf(nil), now: created.Add(grace), wantDeleted: true,
		},
		"unreferenced within the grace period: kept and looked at again": {
			rt: copyOf(nil), now: created.Add(grace - time.Minute), wantAfter: time.Minute,
		},
		"pinned to recently: the grace runs from the stamp": {
			rt: copyOf(func(rt *trainer.TrainingRuntime) {
				rt.Annotations[v1alpha1.AnnotationPinnedAt] = created.Add(time.Hour).Format(time.RFC3339)
			}),
			now: created.Add(time.Hour + 3*time.Minute), wantAfter: grace - 3*time.Minute,
		},
		"referenced: kept": {
			rt: copyOf(nil), cached: []client.Object{user("a", "torch-0123456789ab")}, now: created.Add(time.Hour),
		},
		"a job of another runtime does not keep it": {
			rt: copyOf(nil), cached: []client.Object{user("a", "torch-fedcba987654")}, now: created.Add(time.Hour), wantDeleted: true,
		},
		"referenced by a job the cache has not seen yet: kept": {
			rt: copyOf(nil), live: []client.Object{user("new", "torch-0123456789ab")}, now: created.Add(time.Hour),
		},
		"pinned to between the read and the delete: kept": {
			rt: copyOf(nil), now: created.Add(time.Hour), touchOnGet: true, wantAfter: time.Second,
		},
		"not a pinned copy: kept": {
			rt: copyOf(func(rt *trainer.TrainingRuntime) { rt.Labels, rt.Annotations = nil, nil }), now: created.Add(time.Hour),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			objs := append([]client.Object{tc.rt}, tc.cached...)
			b := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(objs...).
				WithIndex(&trainer.TrainJob{}, runtimeRefIndex, indexRuntimeRef)
			if tc.touchOnGet {
				b = b.WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, o ...client.GetOption) error {
					if err := c.Get(ctx, key, obj, o...); err != nil {
						return err
					}
					touched := obj.DeepCopyObject().(*trainer.TrainingRuntime)
					touched.Annotations[v1alpha1.AnnotationPinnedAt] = tc.now.Format(time.RFC3339)
					return c.Update(ctx, touched)
				}})
			}
			c := b.Build()
			live := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(append(tc.cached, tc.live...)...).Build()
			g := &GC{Client: c, Reader: live, Clock: clocktesting.NewFakePassiveClock(tc.now), GracePeriod: grace}
			res, err := g.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(tc.rt)})
			if err != nil {
				t.Fatalf("Reconcile: %v", err)
			}
			if res.RequeueAfter != tc.wantAfter {
				t.Errorf("RequeueAfter = %s, want %s", res.RequeueAfter, tc.wantAfter)
			}
			err = c.Get(context.Background(), client.ObjectKeyFromObject(tc.rt), &trainer.TrainingRuntime{})
			if deleted := apierrors.IsNotFound(err); deleted != tc.wantDeleted {
				t.Errorf("deleted = %v (get: %v), want %v", deleted, err, tc.wantDeleted)
			}
		})
	}
}

// TestOnlyEventsThatMayFreeACopyWakeTheCollector: a job's deletion, or an
// update that changes its pin (which the policy refuses), asks whether its copy is still
// used; its creation and the many updates of a running job do not.
func TestOnlyEventsThatMayFreeACopyWakeTheCollector(t *testing.T) {
	job := func(runtime string) *trainer.TrainJob {
		return pinnedTo("a", runtime)
	}
	suspended := job("torch-0123456789ab")
	suspended.Spec.Suspend = ptr.To(true)
	cases := map[string]struct {
		passes func() bool
		want   bool
	}{
		"created": {passes: func() bool { return mayFreeACopy.Create(event.CreateEvent{Object: job("torch-0123456789ab")}) }},
		"status or suspension changed": {passes: func() bool {
			return mayFreeACopy.Update(event.UpdateEvent{ObjectOld: job("torch-0123456789ab"), ObjectNew: suspended})
		}},
		"pinned to another copy": {want: true, passes: func() bool {
			return mayFreeACopy.Update(event.UpdateEvent{ObjectOld: job("torch-0123456789ab"), ObjectNew: job("torch-fedcba987654")})
		}},
		"deleted": {want: true, passes: func() bool { return mayFreeACopy.Delete(event.DeleteEvent{Object: job("torch-0123456789ab")}) }},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.passes(); got != tc.want {
				t.Errorf("wakes the collector: %v, want %v", got, tc.want)
			}
		})
	}
}

// pinnedTo is a TrainJob whose pin annotations name the copy "torch-<12 hex
// digits>" of ClusterTrainingRuntime torch, as copy names it.
func pinnedTo(name, copy string) *trainer.TrainJob {
	tj := tytesting.MakeTrainJob(name, ns).Obj()
	hash := "sha256:" + strings.TrimPrefix(copy, "torch-") + strings.Repeat("0", 52)
	tj.Annotations = map[string]string{v1alpha1.AnnotationRuntimeSource: "ClusterTrainingRuntime/torch", v1alpha1.AnnotationRuntimeHash: hash}
	return tj
}

package snapshot

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	kueueconstants "sigs.k8s.io/kueue/pkg/controller/constants"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// squatter is a TrainingRuntime a tenant made under the name the webhook
// will compute for torch-distributed as it is now.
func squatter(t *testing.T, mutate func(*trainer.TrainingRuntime)) *trainer.TrainingRuntime {
	t.Helper()
	_, hash := mustEncode(t, tytesting.TorchRuntimeSpec(1))
	rt := trainingRuntime(pinnedName("torch-distributed", hash), ns, tytesting.TorchRuntimeSpec(1))
	rt.Labels = map[string]string{v1alpha1.LabelPinnedRuntime: "true"}
	rt.Annotations = map[string]string{v1alpha1.AnnotationRuntimeSource: "ClusterTrainingRuntime/torch-distributed", v1alpha1.AnnotationRuntimeHash: hash}
	mutate(rt)
	return rt
}

// TestPinRefusesCopyOfOtherContent: a TrainingRuntime already under the
// computed name is used only if it is a pinned copy of the same content.
func TestPinRefusesCopyOfOtherContent(t *testing.T) {
	cases := map[string]func(*trainer.TrainingRuntime){
		"a bigger spec under the pinned name": func(rt *trainer.TrainingRuntime) { rt.Spec = tytesting.TorchRuntimeSpec(8) },
		"a bigger spec annotated with its own hash": func(rt *trainer.TrainingRuntime) {
			rt.Spec = tytesting.TorchRuntimeSpec(8)
			_, rt.Annotations[v1alpha1.AnnotationRuntimeHash], _ = Encode(rt.Spec)
		},
		"the right spec without the pinned label":    func(rt *trainer.TrainingRuntime) { rt.Labels = nil },
		"the right spec annotated with another hash": func(rt *trainer.TrainingRuntime) { rt.Annotations[v1alpha1.AnnotationRuntimeHash] = "sha256:0123" },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			rt := squatter(t, mutate)
			c := newClient(tytesting.MakeClusterTrainingRuntime("torch-distributed").Obj(), rt)
			tj := tytesting.MakeTrainJob("train", ns).Queue("q").Obj()
			before := tj.DeepCopy()
			err := Pin(context.Background(), c, c, tj)
			if !errors.Is(err, ErrPinnedCopyMismatch) {
				t.Fatalf("Pin error = %v, want %v", err, ErrPinnedCopyMismatch)
			}
			if diff := cmp.Diff(before, tj); diff != "" {
				t.Errorf("a refused Pin changed the job (-before +after):\n%s", diff)
			}
			// The webhook turns it into a denial naming the copy.
			w := &PinWebhook{Reader: c, Client: c}
			resp := w.Handle(context.Background(), admissionRequest(t, admissionv1.Create, tj, false))
			if resp.Allowed || resp.Result.Code != http.StatusForbidden || !strings.Contains(resp.Result.Message, rt.Name) {
				t.Errorf("webhook allowed=%v result=%+v, want a 403 naming %s", resp.Allowed, resp.Result, rt.Name)
			}
		})
	}
}

// TestPinTouchesReusedCopy: reusing a copy stamps v1alpha1.AnnotationPinnedAt, an
// update at the version read, so a collector holding an older version
// cannot delete it.
func TestPinTouchesReusedCopy(t *testing.T) {
	rt := squatter(t, func(rt *trainer.TrainingRuntime) {
		rt.Annotations[v1alpha1.AnnotationPinnedAt] = "2020-01-01T00:00:00Z"
	})
	c := newClient(tytesting.MakeClusterTrainingRuntime("torch-distributed").Obj(), rt)
	var old trainer.TrainingRuntime
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(rt), &old); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	tj := tytesting.MakeTrainJob("train", ns).Obj()
	if _, err := pinAt(context.Background(), c, c, tj, reuse{now: now}); err != nil {
		t.Fatal(err)
	}
	var got trainer.TrainingRuntime
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(rt), &got); err != nil {
		t.Fatal(err)
	}
	if got.Annotations[v1alpha1.AnnotationPinnedAt] != now.Format(time.RFC3339) {
		t.Errorf("%s = %q, want %s", v1alpha1.AnnotationPinnedAt, got.Annotations[v1alpha1.AnnotationPinnedAt], now.Format(time.RFC3339))
	}
	err := c.Delete(context.Background(), &old, client.Preconditions{UID: &old.UID, ResourceVersion: &old.ResourceVersion})
	if !apierrors.IsConflict(err) {
		t.Errorf("delete at the version read before the pin: %v, want a conflict", err)
	}
}

// TestPinRecreatesCopyCollectedMidway: the copy exists when Pin creates it
// and is gone when Pin reads it, or when Pin touches it; Pin creates it
// again rather than point the job at nothing.
func TestPinRecreatesCopyCollectedMidway(t *testing.T) {
	for _, at := range []string{"get", "update"} {
		t.Run("collected before the "+at, func(t *testing.T) {
			rt := squatter(t, func(*trainer.TrainingRuntime) {})
			collected := false
			collect := func(ctx context.Context, c client.WithWatch) {
				if !collected {
					collected = true
					if err := c.Delete(ctx, rt.DeepCopy()); err != nil {
						t.Fatal(err)
					}
				}
			}
			c := fake.NewClientBuilder().WithScheme(testScheme()).
				WithObjects(tytesting.MakeClusterTrainingRuntime("torch-distributed").Obj(), rt).
				WithInterceptorFuncs(interceptor.Funcs{
					Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, o ...client.GetOption) error {
						if _, ok := obj.(*trainer.TrainingRuntime); ok && at == "get" && key.Name == rt.Name {
							collect(ctx, c)
						}
						return c.Get(ctx, key, obj, o...)
					},
					Update: func(ctx context.Context, c client.WithWatch, obj client.Object, o ...client.UpdateOption) error {
						if at == "update" {
							collect(ctx, c)
						}
						return c.Update(ctx, obj, o...)
					},
				}).Build()
			tj := tytesting.MakeTrainJob("train", ns).Obj()
			mustPin(t, c, tj)
			if !collected {
				t.Fatal("the copy was never collected: the test did not exercise the race")
			}
			var got trainer.TrainingRuntime
			if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: copyName(t, tj)}, &got); err != nil {
				t.Fatalf("the job is pinned to %s: %v", copyName(t, tj), err)
			}
		})
	}
}

// TestTakeRefusesChangedPinnedCopy: a pinned copy whose content changed
// under the hub (a privileged client past the policy, or a delete and a
// re-create) is not dispatched.
func TestTakeRefusesChangedPinnedCopy(t *testing.T) {
	c := newClient(tytesting.MakeClusterTrainingRuntime("torch-distributed").Obj())
	tj := tytesting.MakeTrainJob("train", ns).Obj()
	mustPin(t, c, tj)
	if _, err := Take(context.Background(), c, tj); err != nil {
		t.Fatalf("Take of the untouched copy: %v", err)
	}
	cases := map[string]func(*trainer.TrainingRuntime){
		"a bigger spec": func(rt *trainer.TrainingRuntime) { rt.Spec = tytesting.TorchRuntimeSpec(8) },
		"a bigger spec, annotated to match it": func(rt *trainer.TrainingRuntime) {
			rt.Spec = tytesting.TorchRuntimeSpec(8)
			rt.Annotations[v1alpha1.AnnotationRuntimeHash] = "x"
		},
		"a bigger spec, unlabelled": func(rt *trainer.TrainingRuntime) { rt.Spec = tytesting.TorchRuntimeSpec(8); rt.Labels = nil },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			c := newClient(tytesting.MakeClusterTrainingRuntime("torch-distributed").Obj())
			tj := tytesting.MakeTrainJob("train", ns).Obj()
			mustPin(t, c, tj)
			var rt trainer.TrainingRuntime
			if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: copyName(t, tj)}, &rt); err != nil {
				t.Fatal(err)
			}
			mutate(&rt)
			if err := c.Update(context.Background(), &rt); err != nil {
				t.Fatal(err)
			}
			_, err := Take(context.Background(), c, tj)
			if !errors.Is(err, ErrSnapshotMismatch) || !strings.Contains(err.Error(), tj.Annotations[v1alpha1.AnnotationRuntimeHash]) {
				t.Fatalf("Take error = %v, want %v naming the pinned hash", err, ErrSnapshotMismatch)
			}
		})
	}
}

// TestTakeRefusesUnpinned: a job without the pin webhook's marks, however
// it got them wrong, is never snapshotted for dispatch: its runtime is a live
// one the tenant can still edit. The same job pinned is taken.
func TestTakeRefusesUnpinned(t *testing.T) {
	cases := map[string]func(*trainer.TrainJob){
		"pinned":             nil,
		"no pin annotations": func(tj *trainer.TrainJob) { tj.Annotations = nil },
		"the hash only":      func(tj *trainer.TrainJob) { delete(tj.Annotations, v1alpha1.AnnotationRuntimeSource) },
		"the source only":    func(tj *trainer.TrainJob) { delete(tj.Annotations, v1alpha1.AnnotationRuntimeHash) },
		"empty annotations": func(tj *trainer.TrainJob) {
			tj.Annotations[v1alpha1.AnnotationRuntimeHash], tj.Annotations[v1alpha1.AnnotationRuntimeSource] = "", ""
		},
		"a short hash": func(tj *trainer.TrainJob) { tj.Annotations[v1alpha1.AnnotationRuntimeHash] = "sha256:0123" },
		"a hash of another kind": func(tj *trainer.TrainJob) {
			tj.Annotations[v1alpha1.AnnotationRuntimeHash] = "md5:" + strings.Repeat("0", 64)
		},
		"a source without a kind": func(tj *trainer.TrainJob) { tj.Annotations[v1alpha1.AnnotationRuntimeSource] = "torch-distributed" },
	}
	for name, edit := range cases {
		t.Run(name, func(t *testing.T) {
			c := newClient(tytesting.MakeClusterTrainingRuntime("torch-distributed").Obj())
			tj := tytesting.MakeTrainJob("train", ns).Obj()
			mustPin(t, c, tj)
			if edit == nil {
				if _, err := Take(context.Background(), c, tj); err != nil {
					t.Fatalf("Take of a pinned job: %v", err)
				}
				return
			}
			edit(tj)
			_, err := Take(context.Background(), c, tj)
			if !errors.Is(err, ErrNotPinned) {
				t.Fatalf("Take error = %v, want %v", err, ErrNotPinned)
			}
			for _, want := range []string{kueueconstants.QueueLabel, tj.Spec.RuntimeRef.Name, "create it again with the label"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Take error %q does not say %q", err, want)
				}
			}
		})
	}
}

// TestPinWebhookStampsClock: the webhook stamps the copy with its clock.
func TestPinWebhookStampsClock(t *testing.T) {
	now := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	c := newClient(tytesting.MakeClusterTrainingRuntime("torch-distributed").Obj())
	w := &PinWebhook{Reader: c, Client: c, Clock: clocktesting.NewFakePassiveClock(now)}
	resp := w.Handle(context.Background(), admissionRequest(t, admissionv1.Create, tytesting.MakeTrainJob("train", ns).Obj(), false))
	if !resp.Allowed {
		t.Fatalf("refused: %+v", resp.Result)
	}
	copies := pinnedCopies(t, c, ns)
	if len(copies) != 1 || copies[0].Annotations[v1alpha1.AnnotationPinnedAt] != now.Format(time.RFC3339) {
		t.Errorf("copies %v, want one stamped %s", copies, now.Format(time.RFC3339))
	}
}

// countingClient counts the writes and live reads of TrainingRuntimes.
func countingClient(objs ...client.Object) (client.WithWatch, *atomic.Int32, *atomic.Int32) {
	var writes, reads atomic.Int32
	c := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(objs...).
		WithInterceptorFuncs(interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, o ...client.CreateOption) error {
				writes.Add(1)
				return c.Create(ctx, obj, o...)
			},
			Update: func(ctx context.Context, c client.WithWatch, obj client.Object, o ...client.UpdateOption) error {
				writes.Add(1)
				return c.Update(ctx, obj, o...)
			},
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, o ...client.GetOption) error {
				if _, ok := obj.(*trainer.TrainingRuntime); ok {
					reads.Add(1)
				}
				return c.Get(ctx, key, obj, o...)
			},
		}).Build()
	return c, &writes, &reads
}

// TestPinReusesFreshCopyWithoutWrites: a copy stamped less than the reuse
// window ago is reused as it is (from the cache when it has it, with no
// request at all); an older one is stamped; a cached copy of other content
// or being deleted is never trusted.
func TestPinReusesFreshCopyWithoutWrites(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	stamped := func(ago time.Duration) func(*trainer.TrainingRuntime) {
		return func(rt *trainer.TrainingRuntime) {
			rt.Annotations[v1alpha1.AnnotationPinnedAt] = now.Add(-ago).Format(time.RFC3339)
		}
	}
	otherContent := func(rt *trainer.TrainingRuntime) {
		stamped(0)(rt)
		rt.Spec = tytesting.TorchRuntimeSpec(8)
	}
	cases := map[string]struct {
		live, cached func(*trainer.TrainingRuntime) // cached nil: not in the cache
		within       time.Duration
		wantWrites   int32
		wantLiveGets int32
		wantStamp    time.Time
		wantErr      error
	}{
		"fresh in the cache: no request":  {live: stamped(10 * time.Second), cached: stamped(10 * time.Second), within: time.Minute, wantStamp: now.Add(-10 * time.Second)},
		"fresh, not cached yet: one read": {live: stamped(10 * time.Second), within: time.Minute, wantWrites: 1, wantLiveGets: 1, wantStamp: now.Add(-10 * time.Second)},
		"stale in the cache: stamped": {live: stamped(2 * time.Minute), cached: stamped(2 * time.Minute), within: time.Minute,
			wantWrites: 2, wantLiveGets: 1, wantStamp: now},
		"cache older than the live stamp": {live: stamped(10 * time.Second), cached: stamped(2 * time.Minute), within: time.Minute,
			wantWrites: 1, wantLiveGets: 1, wantStamp: now.Add(-10 * time.Second)},
		"no window: every job stamps": {live: stamped(time.Second), cached: stamped(time.Second), wantWrites: 2, wantLiveGets: 1, wantStamp: now},
		"cached copy of other content": {live: otherContent, cached: otherContent, within: time.Minute,
			wantWrites: 1, wantLiveGets: 1, wantErr: ErrPinnedCopyMismatch},
		"cached copy being deleted": {live: stamped(2 * time.Minute), cached: func(rt *trainer.TrainingRuntime) {
			stamped(0)(rt)
			rt.DeletionTimestamp = &metav1.Time{Time: now}
			rt.Finalizers = []string{"test"}
		}, within: time.Minute, wantWrites: 2, wantLiveGets: 1, wantStamp: now},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			live := squatter(t, tc.live)
			c, writes, reads := countingClient(tytesting.MakeClusterTrainingRuntime("torch-distributed").Obj(), live)
			u := reuse{now: now, within: tc.within}
			if tc.cached != nil {
				u.cache = newClient(squatter(t, tc.cached))
			}
			tj := tytesting.MakeTrainJob("train", ns).Obj()
			_, err := pinAt(context.Background(), c, c, tj, u)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("pin error = %v, want %v", err, tc.wantErr)
			}
			if writes.Load() != tc.wantWrites || reads.Load() != tc.wantLiveGets {
				t.Errorf("writes %d, live reads of the copy %d; want %d, %d", writes.Load(), reads.Load(), tc.wantWrites, tc.wantLiveGets)
			}
			if tc.wantErr != nil {
				return
			}
			if got := copyName(t, tj); got != live.Name {
				t.Errorf("job pinned to %q, want the copy %q", got, live.Name)
			}
			var got trainer.TrainingRuntime
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(live), &got); err != nil {
				t.Fatal(err)
			}
			if at := got.Annotations[v1alpha1.AnnotationPinnedAt]; at != tc.wantStamp.Format(time.RFC3339) {
				t.Errorf("%s = %q, want %s", v1alpha1.AnnotationPinnedAt, at, tc.wantStamp.Format(time.RFC3339))
			}
		})
	}
}

// TestPinBurstWritesTheCopyOnce: parallel pins of one runtime, the way a
// burst of submissions reaches the webhook, make one copy in one write and
// reuse it; every job points at it.
func TestPinBurstWritesTheCopyOnce(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	c, writes, _ := countingClient(tytesting.MakeClusterTrainingRuntime("torch-distributed").Obj())
	const jobs = 32
	names := make([]string, jobs)
	var wg sync.WaitGroup
	errs := make(chan error, jobs)
	for i := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tj := tytesting.MakeTrainJob(fmt.Sprintf("train-%d", i), ns).Obj()
			_, err := pinAt(context.Background(), c, c, tj, reuse{now: now, within: time.Minute})
			errs <- err
			if ref, err := PinnedRef(tj); err == nil {
				names[i] = ref.Name
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("pin: %v", err)
		}
	}
	copies := pinnedCopies(t, c, ns)
	if len(copies) != 1 {
		t.Fatalf("%d pinned copies, want 1", len(copies))
	}
	for i, n := range names {
		if n != copies[0].Name {
			t.Errorf("job %d points at %q, want %q", i, n, copies[0].Name)
		}
	}
	// Every create is attempted; only the first makes the copy, and none
	// of the others writes it again.
	if got := writes.Load(); got != jobs {
		t.Errorf("%d writes (creates and updates), want %d creates and no update", got, jobs)
	}
}

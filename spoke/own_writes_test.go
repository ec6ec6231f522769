package spoke

import (
	"context"
	"testing"

	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// TestPassOnACacheBehindOwnWrite runs a second pass that reads the
// Dispatch as it was before the first pass's writes, as an informer cache
// that has not yet seen them does: the pass must neither write (a sure
// conflict), nor submit or observe again, nor repeat events. A pass that
// then reads the Dispatch as written, or as another writer changed it
// later, goes on as usual.
func TestPassOnACacheBehindOwnWrite(t *testing.T) {
	cases := map[string]struct {
		// second is what the second pass reads: "before" the first pass's
		// writes, "written" after them, "later" after another writer's.
		second     string
		wantWrites int
		wantCalls  fakeCalls
	}{
		"cache behind: the pass ends at once": {
			second: "before", wantWrites: 1, wantCalls: fakeCalls{Submit: 1, Create: 1, Observe: 1},
		},
		"cache caught up: the pass observes, nothing changed to write": {
			second: "written", wantWrites: 1, wantCalls: fakeCalls{Submit: 1, Create: 1, Observe: 2},
		},
		"another writer changed it later: the pass observes": {
			second: "later", wantWrites: 1, wantCalls: fakeCalls{Submit: 1, Create: 1, Observe: 2},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			d := dispatch().Obj()
			key := client.ObjectKeyFromObject(d)
			var stale *v1alpha1.Dispatch // set: Get answers this copy once
			writes := 0
			hub := fake.NewClientBuilder().WithScheme(HubScheme()).WithObjects(d).
				WithStatusSubresource(&v1alpha1.Dispatch{}).
				WithInterceptorFuncs(interceptor.Funcs{
					Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
						if s := stale; s != nil {
							stale = nil
							s.DeepCopyInto(obj.(*v1alpha1.Dispatch))
							return nil
						}
						return c.Get(ctx, k, obj, opts...)
					},
					SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
						writes++
						return c.SubResource(sub).Update(ctx, obj, opts...)
					},
				}).Build()
			var before v1alpha1.Dispatch
			if err := hub.Get(ctx, key, &before); err != nil {
				t.Fatal(err)
			}
			be := newFakeBackend()
			rec := record.NewFakeRecorder(100)
			r := &DispatchReconciler{Hub: hub, Target: testTarget, Backend: be, Clock: testingclock.NewFakeClock(t0), Resync: resync, Recorder: rec}
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
				t.Fatal(err)
			}
			events := len(rec.Events)
			switch tc.second {
			case "before":
				stale = &before
			case "later":
				var cur v1alpha1.Dispatch
				if err := hub.Get(ctx, key, &cur); err != nil {
					t.Fatal(err)
				}
				cur.Labels = map[string]string{"touched": "by another writer"}
				if err := hub.Update(ctx, &cur); err != nil {
					t.Fatal(err)
				}
			}
			res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
			if err != nil {
				t.Fatalf("second pass: %v", err)
			}
			if writes != tc.wantWrites {
				t.Errorf("status writes = %d, want %d", writes, tc.wantWrites)
			}
			if be.calls.Submit != tc.wantCalls.Submit || be.calls.Create != tc.wantCalls.Create || be.calls.Observe != tc.wantCalls.Observe {
				t.Errorf("backend calls = %+v, want %+v", be.calls, tc.wantCalls)
			}
			if len(rec.Events) != events {
				t.Errorf("second pass recorded %d events, want none", len(rec.Events)-events)
			}
			if tc.second == "before" && res != (ctrl.Result{}) {
				t.Errorf("a pass behind the agent's own write = %+v, want to wait for the write's watch event", res)
			}
		})
	}
}

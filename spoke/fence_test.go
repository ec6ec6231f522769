package spoke

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/internal/metrics"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

func work(name, dispatchNS, dispatchName string, attempt int32) backends.RemoteWork {
	return backends.RemoteWork{
		Ref:               v1alpha1.RemoteRef{Kind: "JobSet", Namespace: "trainyard-jobs", Name: name},
		DispatchNamespace: dispatchNS, DispatchName: dispatchName, Attempt: attempt,
	}
}

func TestFenceSweep(t *testing.T) {
	live := tytesting.MakeDispatch("live", agentNS, testTarget).Attempt(2).Obj()
	requeued := tytesting.MakeDispatch("requeued", agentNS, testTarget).Attempt(3).Obj()
	deleting := ours(tytesting.MakeDispatch("deleting", agentNS, testTarget)).DeletionTimestamp(t0).Obj()
	elsewhere := tytesting.MakeDispatch("gone", "trainyard-gpu-b", "gpu-b").Obj()
	cases := map[string]struct {
		dispatches []client.Object
		works      []backends.RemoteWork
		prepare    func(*fakeBackend)
		getErr     error
		wantN      int
		wantErr    bool
		wantLeft   []string
	}{
		"nothing to sweep": {},
		"work of a live Dispatch stays": {
			dispatches: []client.Object{live},
			works:      []backends.RemoteWork{work("r-live", agentNS, "live", 2)},
			wantLeft:   []string{"r-live"},
		},
		"work whose Dispatch is gone is deleted": {
			works: []backends.RemoteWork{work("r-gone", agentNS, "gone", 1)},
			wantN: 1,
		},
		"work of another attempt is deleted": {
			dispatches: []client.Object{requeued},
			works:      []backends.RemoteWork{work("r-old", agentNS, "requeued", 2), work("r-new", agentNS, "requeued", 3)},
			wantN:      1,
			wantLeft:   []string{"r-new"},
		},
		"work of a Dispatch being deleted is left to its cancel": {
			dispatches: []client.Object{deleting},
			works:      []backends.RemoteWork{work("r-deleting", agentNS, "deleting", 1)},
			wantLeft:   []string{"r-deleting"},
		},
		"work of another agent namespace is not judged": {
			dispatches: []client.Object{elsewhere},
			works:      []backends.RemoteWork{work("r-theirs", "trainyard-gpu-b", "missing", 1)},
			wantLeft:   []string{"r-theirs"},
		},
		"a mixed sweep": {
			dispatches: []client.Object{live, requeued},
			works: []backends.RemoteWork{
				work("r-live", agentNS, "live", 2), work("r-gone", agentNS, "gone", 1),
				work("r-old", agentNS, "requeued", 1), work("r-theirs", "other", "x", 1),
			},
			wantN:    2,
			wantLeft: []string{"r-live", "r-theirs"},
		},
		"a hub read error stops the sweep and deletes nothing": {
			works:    []backends.RemoteWork{work("r-gone", agentNS, "gone", 1)},
			getErr:   apierrors.NewForbidden(schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "dispatches"}, "gone", errors.New("rbac")),
			wantErr:  true,
			wantLeft: []string{"r-gone"},
		},
		"a list error": {
			prepare: func(b *fakeBackend) { b.listErr = errors.New("spoke unreachable") },
			wantErr: true,
		},
		"a delete error": {
			works:    []backends.RemoteWork{work("r-gone", agentNS, "gone", 1)},
			prepare:  func(b *fakeBackend) { b.deleteErr = errors.New("forbidden") },
			wantErr:  true,
			wantLeft: []string{"r-gone"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b := fake.NewClientBuilder().WithScheme(HubScheme()).WithObjects(append(tc.dispatches, hubTarget("hub-1"))...)
			if tc.getErr != nil {
				b = b.WithInterceptorFuncs(interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
					return tc.getErr
				}})
			}
			be := newFakeBackend()
			for _, w := range tc.works {
				be.putWork(w)
			}
			if tc.prepare != nil {
				tc.prepare(be)
			}
			f := &Fence{Hub: b.Build(), Namespace: agentNS, Target: testTarget, Lister: be}
			n, err := f.Sweep(context.Background())
			if (err != nil) != tc.wantErr {
				t.Fatalf("Sweep error = %v, want error %v", err, tc.wantErr)
			}
			if n != tc.wantN {
				t.Errorf("Sweep deleted %d, want %d", n, tc.wantN)
			}
			if diff := cmp.Diff(tc.wantLeft, be.remoteNames(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("remote work left (-want +got):\n%s", diff)
			}
		})
	}
}

// hubTarget is the agent's Target as a hub with identity id records it.
func hubTarget(id string) *v1alpha1.Target {
	tg := tytesting.MakeKubernetesTarget(testTarget, "gpu").Obj()
	tg.Status.HubID = id
	return tg
}

// TestFenceTrustsOnlyTheHubItKnows: a fence pass deletes nothing on a hub
// whose identity is not the one the agent was given or first saw.
func TestFenceTrustsOnlyTheHubItKnows(t *testing.T) {
	cases := map[string]struct {
		known, seen string
		wantN       int
		wantErr     bool
		wantKnown   string
		wantEvents  []string
	}{
		"first sight is trusted":       {seen: "hub-1", wantN: 1, wantKnown: "hub-1", wantEvents: []string{EventFenced}},
		"the known hub":                {known: "hub-1", seen: "hub-1", wantN: 1, wantKnown: "hub-1", wantEvents: []string{EventFenced}},
		"another hub deletes nothing":  {known: "hub-1", seen: "hub-2", wantErr: true, wantKnown: "hub-1", wantEvents: []string{EventFenceUnknownHub}},
		"a hub without identity waits": {seen: "", wantN: 0},
		"a known agent on a blank hub": {known: "hub-1", seen: "", wantKnown: "hub-1"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			hub := fake.NewClientBuilder().WithScheme(HubScheme()).WithObjects(hubTarget(tc.seen)).Build()
			be := newFakeBackend()
			be.putWork(work("r-gone", agentNS, "gone", 1))
			rec := record.NewFakeRecorder(10)
			f := &Fence{Hub: hub, Namespace: agentNS, Target: testTarget, Lister: be, HubID: tc.known, Recorder: rec}
			n, err := f.Sweep(context.Background())
			if (err != nil) != tc.wantErr || n != tc.wantN {
				t.Fatalf("Sweep = %d, %v; want %d, error %v", n, err, tc.wantN, tc.wantErr)
			}
			if f.HubID != tc.wantKnown {
				t.Errorf("known hub = %q, want %q", f.HubID, tc.wantKnown)
			}
			if diff := cmp.Diff(tc.wantEvents, eventReasons(rec), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFenceBound: one pass deletes at most MaxDeletes stale jobs and says
// so when it stops short; live work never counts.
func TestFenceBound(t *testing.T) {
	cases := map[string]struct {
		stale, live int
		max         int
		wantN       int
		wantEvents  []string
	}{
		"under the bound":            {stale: 2, max: 3, wantN: 2},
		"at the bound":               {stale: 3, max: 3, wantN: 3},
		"over the bound stops short": {stale: 5, max: 3, wantN: 3, wantEvents: []string{EventFenceBounded}},
		"live work does not count":   {stale: 2, live: 4, max: 2, wantN: 2},
		"default bound":              {stale: DefaultFenceMaxDeletes + 1, wantN: DefaultFenceMaxDeletes, wantEvents: []string{EventFenceBounded}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			objs := []client.Object{hubTarget("hub-1")}
			be := newFakeBackend()
			for i := 0; i < tc.live; i++ {
				d := tytesting.MakeDispatch(fmt.Sprintf("live-%d", i), agentNS, testTarget).Attempt(1).Obj()
				objs = append(objs, d)
				be.putWork(work(fmt.Sprintf("r-live-%d", i), agentNS, d.Name, 1))
			}
			for i := 0; i < tc.stale; i++ {
				be.putWork(work(fmt.Sprintf("r-stale-%d", i), agentNS, fmt.Sprintf("gone-%d", i), 1))
			}
			rec := record.NewFakeRecorder(100)
			f := &Fence{Hub: fake.NewClientBuilder().WithScheme(HubScheme()).WithObjects(objs...).Build(),
				Namespace: agentNS, Target: testTarget, Lister: be, MaxDeletes: tc.max, Recorder: rec}
			before := testutil.ToFloat64(metrics.FenceDeletions)
			n, err := f.Sweep(context.Background())
			if err != nil || n != tc.wantN {
				t.Fatalf("Sweep = %d, %v; want %d", n, err, tc.wantN)
			}
			if left := len(be.remoteNames()); left != tc.live+tc.stale-tc.wantN {
				t.Errorf("%d remote jobs left, want %d", left, tc.live+tc.stale-tc.wantN)
			}
			if got := testutil.ToFloat64(metrics.FenceDeletions) - before; got != float64(tc.wantN) {
				t.Errorf("fence_deletions_total rose by %v, want %d", got, tc.wantN)
			}
			// One Fenced event on each Dispatch whose work went, then the bound's.
			want := slices.Repeat([]string{EventFenced}, tc.wantN)
			if diff := cmp.Diff(append(want, tc.wantEvents...), eventReasons(rec), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// eventReasons drains a fake recorder into the reasons it recorded.
func eventReasons(rec *record.FakeRecorder) []string {
	var out []string
	for _, e := range drainEvents(rec) {
		if f := strings.Fields(e); len(f) > 1 {
			out = append(out, f[1])
		}
	}
	return out
}

// TestFenceReadsInFullOnlyWhatItMayDelete: one live metadata list keeps the
// work of every Dispatch at its attempt; only work it does not show so is
// read in full, and that read decides.
func TestFenceReadsInFullOnlyWhatItMayDelete(t *testing.T) {
	labelled := func(name string, attempt int32, label string) client.Object {
		d := tytesting.MakeDispatch(name, agentNS, testTarget).Attempt(attempt).Obj()
		d.Labels = map[string]string{v1alpha1.LabelAttempt: label}
		return d
	}
	var gets, lists int
	hub := fake.NewClientBuilder().WithScheme(HubScheme()).
		WithObjects(labelled("a", 2, "2"), labelled("b", 1, "1"), labelled("relabelled", 3, "2"), hubTarget("hub-1")).
		WithInterceptorFuncs(interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, o ...client.GetOption) error {
				if _, ok := obj.(*v1alpha1.Dispatch); ok {
					gets++
				}
				return c.Get(ctx, key, obj, o...)
			},
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, o ...client.ListOption) error {
				lists++
				return c.List(ctx, list, o...)
			},
		}).Build()
	be := newFakeBackend()
	for _, w := range []backends.RemoteWork{work("r-a", agentNS, "a", 2), work("r-b", agentNS, "b", 1),
		work("r-gone", agentNS, "gone", 1), work("r-relabelled", agentNS, "relabelled", 3)} {
		be.putWork(w)
	}
	f := &Fence{Hub: hub, Namespace: agentNS, Target: testTarget, Lister: be}
	n, err := f.Sweep(context.Background())
	if err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1 deleted", n, err)
	}
	if diff := cmp.Diff([]string{"r-a", "r-b", "r-relabelled"}, be.remoteNames()); diff != "" {
		t.Errorf("remote work left (-want +got):\n%s", diff)
	}
	if gets != 2 || lists != 1 {
		t.Errorf("%d Dispatch GETs and %d lists, want 2 (the gone one, the relabelled one) and 1", gets, lists)
	}
}

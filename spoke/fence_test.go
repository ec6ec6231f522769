package spoke

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	tyt "github.com/trainyard-dev/trainyard/internal/testing"
)

func work(name, dispatchNS, dispatchName string, attempt int32) backends.RemoteWork {
	return backends.RemoteWork{
		Ref:               v1alpha1.RemoteRef{Kind: "JobSet", Namespace: "trainyard-jobs", Name: name},
		DispatchNamespace: dispatchNS, DispatchName: dispatchName, Attempt: attempt,
	}
}

func TestFenceSweep(t *testing.T) {
	live := tyt.MakeDispatch("live", agentNS, testTarget).Attempt(2).Obj()
	requeued := tyt.MakeDispatch("requeued", agentNS, testTarget).Attempt(3).Obj()
	deleting := ours(tyt.MakeDispatch("deleting", agentNS, testTarget)).DeletionTimestamp(t0).Obj()
	elsewhere := tyt.MakeDispatch("gone", "trainyard-gpu-b", "gpu-b").Obj()
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
			b := fake.NewClientBuilder().WithScheme(HubScheme()).WithObjects(tc.dispatches...)
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
			f := &Fence{Hub: b.Build(), Namespace: agentNS, Lister: be}
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

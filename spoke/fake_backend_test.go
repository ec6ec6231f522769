package spoke

import (
	"context"
	"sort"
	"sync"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
)

// fakeBackend is an in-memory backends.Backend and backends.RemoteLister.
// Remote work is keyed by backends.RemoteName, as a real backend names it,
// so a second Submit of the same Dispatch adopts what the first made.
type fakeBackend struct {
	mu     sync.Mutex
	remote map[string]*fakeRemote

	// Errors returned by the next calls, when set.
	submitErr, observeErr, cancelErr, listErr, deleteErr, capacityErr error
	// cancelLingers makes Cancel report the work as still going once
	// before it is gone, as a JobSet being deleted does.
	cancelLingers bool
	// beforeObserve runs (unlocked) at the start of every Observe, to race
	// the pass with something else, such as the lease's watchdog.
	beforeObserve func()

	calls fakeCalls
}

// fakeCalls counts what the backend was asked to do.
type fakeCalls struct {
	Submit, Create, Observe, Cancel int
	Deleted                         []string
}

type fakeRemote struct {
	work   backends.RemoteWork
	status backends.Status
	// cancelling is set by a lingering Cancel.
	cancelling bool
}

func newFakeBackend() *fakeBackend { return &fakeBackend{remote: map[string]*fakeRemote{}} }

func fakeRef(d *v1alpha1.Dispatch) v1alpha1.RemoteRef {
	return v1alpha1.RemoteRef{Kind: "JobSet", Namespace: "trainyard-jobs", Name: backends.RemoteName(d)}
}

// put stores remote work of d with status st, as if made before.
func (f *fakeBackend) put(d *v1alpha1.Dispatch, st backends.Status) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.remote[backends.RemoteName(d)] = &fakeRemote{
		work:   backends.RemoteWork{Ref: fakeRef(d), DispatchNamespace: d.Namespace, DispatchName: d.Name, Attempt: d.Spec.Attempt},
		status: st,
	}
}

// putWork stores remote work as ListRemote reports it.
func (f *fakeBackend) putWork(w backends.RemoteWork) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.remote[w.Ref.Name] = &fakeRemote{work: w, status: backends.Status{Phase: v1alpha1.DispatchRunning}}
}

func (f *fakeBackend) has(d *v1alpha1.Dispatch) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.remote[backends.RemoteName(d)] != nil
}

func (f *fakeBackend) Submit(_ context.Context, d *v1alpha1.Dispatch) (*v1alpha1.RemoteRef, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls.Submit++
	if f.submitErr != nil {
		return nil, f.submitErr
	}
	name := backends.RemoteName(d)
	if r, ok := f.remote[name]; ok {
		ref := r.work.Ref
		return &ref, nil
	}
	f.calls.Create++
	ref := fakeRef(d)
	f.remote[name] = &fakeRemote{
		work:   backends.RemoteWork{Ref: ref, DispatchNamespace: d.Namespace, DispatchName: d.Name, Attempt: d.Spec.Attempt},
		status: backends.Status{Phase: v1alpha1.DispatchSubmitted},
	}
	return &ref, nil
}

func (f *fakeBackend) Observe(_ context.Context, d *v1alpha1.Dispatch) (*backends.Status, error) {
	if hook := f.beforeObserve; hook != nil {
		f.beforeObserve = nil
		hook()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls.Observe++
	if f.observeErr != nil {
		return nil, f.observeErr
	}
	r, ok := f.remote[backends.RemoteName(d)]
	if !ok {
		return nil, backends.ErrNotFound
	}
	st := r.status
	return &st, nil
}

func (f *fakeBackend) Cancel(_ context.Context, d *v1alpha1.Dispatch) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls.Cancel++
	if f.cancelErr != nil {
		return false, f.cancelErr
	}
	name := backends.RemoteName(d)
	r, ok := f.remote[name]
	if !ok {
		return true, nil
	}
	if f.cancelLingers && !r.cancelling {
		r.cancelling = true
		return false, nil
	}
	delete(f.remote, name)
	return true, nil
}

func (f *fakeBackend) Capacity(context.Context) (*backends.Capacity, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.capacityErr != nil {
		return nil, f.capacityErr
	}
	return &backends.Capacity{}, nil
}

func (f *fakeBackend) ListRemote(context.Context) ([]backends.RemoteWork, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listErr != nil {
		return nil, f.listErr
	}
	var out []backends.RemoteWork
	for _, r := range f.remote {
		out = append(out, r.work)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ref.Name < out[j].Ref.Name })
	return out, nil
}

func (f *fakeBackend) Delete(_ context.Context, w backends.RemoteWork) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.deleteErr != nil {
		return f.deleteErr
	}
	delete(f.remote, w.Ref.Name)
	f.calls.Deleted = append(f.calls.Deleted, w.Ref.Name)
	return nil
}

// remoteNames lists the remote work left, sorted.
func (f *fakeBackend) remoteNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var names []string
	for n := range f.remote {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

var (
	_ backends.Backend      = (*fakeBackend)(nil)
	_ backends.RemoteLister = (*fakeBackend)(nil)
)

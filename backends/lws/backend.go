package lws

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	lwsv1 "sigs.k8s.io/lws/api/leaderworkerset/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/backends/jobset"
	"github.com/trainyard-dev/trainyard/backends/kubework"
)

// Options configure a Backend.
type Options struct {
	// Namespace on the spoke for the LeaderWorkerSets.
	Namespace string
	// TopologyLevels are the node labels Capacity groups free GPUs by.
	TopologyLevels []string
	// LiveReader reads the API server directly, so "not found" is true
	// before anyone acts on it (see jobset.Options).
	LiveReader client.Reader
	// Logs reads pod logs for Logs (nil: the backend reads no logs).
	Logs  kubernetes.Interface
	Clock clock.PassiveClock
}

// Backend runs Dispatches as LeaderWorkerSets on one spoke cluster.
type Backend struct {
	c    client.Client
	opts Options
	// nodes reports the spoke's capacity: nodes and pod requests are the
	// same whichever workload API made the pods.
	nodes *jobset.Backend
}

var (
	_ backends.Backend      = (*Backend)(nil)
	_ backends.RemoteLister = (*Backend)(nil)
	_ backends.LogReader    = (*Backend)(nil)
)

// New returns a Backend acting through c (its scheme must know
// LeaderWorkerSets), which may read from a cache.
func New(c client.Client, opts Options) *Backend {
	if opts.Namespace == "" {
		opts.Namespace = jobset.DefaultNamespace
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Backend{c: c, opts: opts, nodes: jobset.New(c, jobset.Options{Namespace: opts.Namespace, TopologyLevels: opts.TopologyLevels})}
}

// Capacity is the spoke's capacity, as the JobSet backend counts it.
func (b *Backend) Capacity(ctx context.Context) (*backends.Capacity, error) {
	return b.nodes.Capacity(ctx)
}

func (b *Backend) ref(name string) *v1alpha1.RemoteRef {
	return &v1alpha1.RemoteRef{Kind: Kind, Namespace: b.opts.Namespace, Name: name}
}

func (b *Backend) reader() client.Reader {
	if b.opts.LiveReader != nil {
		return b.opts.LiveReader
	}
	return b.c
}

// get reads a LeaderWorkerSet, confirming a cached "not found" live.
func (b *Backend) get(ctx context.Context, name string) (*lwsv1.LeaderWorkerSet, error) {
	lws := &lwsv1.LeaderWorkerSet{}
	return lws, kubework.Get(ctx, b.c, b.opts.LiveReader, client.ObjectKey{Namespace: b.opts.Namespace, Name: name}, lws)
}

// owned gets d's LeaderWorkerSet (see kubework.GetOwned).
func (b *Backend) owned(ctx context.Context, d *v1alpha1.Dispatch) (*lwsv1.LeaderWorkerSet, error) {
	lws := &lwsv1.LeaderWorkerSet{}
	if err := kubework.GetOwned(ctx, b.c, b.opts.LiveReader, b.opts.Namespace, d, lws, Kind); err != nil {
		return nil, err
	}
	return lws, nil
}

// Submit creates d's LeaderWorkerSet unless it exists; its name derives
// from the Workload UID and attempt only, so a repeated Submit never makes
// a second one. Companions (MPI keys, hostfile) are created after it,
// owned by it; an interrupted Submit's adopt creates those still missing.
func (b *Backend) Submit(ctx context.Context, d *v1alpha1.Dispatch) (*v1alpha1.RemoteRef, error) {
	name := backends.RemoteName(d)
	existing, err := b.get(ctx, name)
	switch {
	case err == nil:
		// Adopt before rendering: work made earlier is kept even if this
		// agent would now render it differently.
		return b.adopt(ctx, existing, d, nil)
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("get leaderworkerset %s/%s: %w", b.opts.Namespace, name, err)
	}
	r, err := Render(d, b.opts.Namespace)
	if err != nil {
		return nil, err
	}
	err = kubework.CreateRemote(ctx, b.c, r.LWS, "leaderworkerset")
	switch {
	case err == nil:
		if err := kubework.CreateCompanions(ctx, b.c, b.reader(), r.LWS, r.Companions); err != nil {
			return nil, err
		}
		return b.ref(name), nil
	case !apierrors.IsAlreadyExists(err):
		return nil, err
	}
	lws := &lwsv1.LeaderWorkerSet{}
	if err := kubework.WaitVisible(ctx, b.c, b.opts.LiveReader, client.ObjectKeyFromObject(r.LWS), lws, Kind); err != nil {
		return nil, err
	}
	return b.adopt(ctx, lws, d, r)
}

// adopt takes over lws, made by an earlier Submit, and creates whichever
// companions it mounts that an interrupted Submit left out, from r (a
// fresh render when nil, made only if the set mounts companions).
func (b *Backend) adopt(ctx context.Context, lws *lwsv1.LeaderWorkerSet, d *v1alpha1.Dispatch, r *Rendered) (*v1alpha1.RemoteRef, error) {
	if err := kubework.CheckOwned(lws, d); err != nil {
		return nil, err
	}
	if lws.DeletionTimestamp != nil {
		return nil, fmt.Errorf("leaderworkerset %s/%s is being deleted", lws.Namespace, lws.Name)
	}
	tmpl := &lws.Spec.LeaderWorkerTemplate
	specs := []*corev1.PodSpec{&tmpl.WorkerTemplate.Spec}
	if tmpl.LeaderTemplate != nil {
		specs = append(specs, &tmpl.LeaderTemplate.Spec)
	}
	if !kubework.MountsCompanions(lws.Name, specs...) {
		return b.ref(lws.Name), nil
	}
	if r == nil {
		var err error
		if r, err = Render(d, b.opts.Namespace); err != nil {
			return nil, err
		}
	}
	if err := kubework.CreateCompanions(ctx, b.c, b.reader(), lws, r.Companions); err != nil {
		return nil, err
	}
	return b.ref(lws.Name), nil
}

// Cancel deletes d's LeaderWorkerSet in the foreground; gone once it is
// NotFound and none of its pods is left.
func (b *Backend) Cancel(ctx context.Context, d *v1alpha1.Dispatch) (bool, error) {
	lws, err := b.owned(ctx, d)
	switch {
	case errors.Is(err, backends.ErrNotFound):
		pods, err := b.pods(ctx, backends.RemoteName(d))
		return err == nil && len(pods) == 0, err
	case err != nil:
		return false, err
	}
	if lws.DeletionTimestamp == nil {
		return false, b.deleteForeground(ctx, lws, &lws.UID)
	}
	return false, nil
}

func (b *Backend) deleteForeground(ctx context.Context, lws *lwsv1.LeaderWorkerSet, uid *types.UID) error {
	return kubework.DeleteForeground(ctx, b.c, lws, uid, "leaderworkerset")
}

// pods lists the pods of the LeaderWorkerSet name, leader and workers.
func (b *Backend) pods(ctx context.Context, name string) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := b.c.List(ctx, &pods, client.InNamespace(b.opts.Namespace),
		client.MatchingLabels{lwsv1.SetNameLabelKey: name}); err != nil {
		return nil, fmt.Errorf("list pods of leaderworkerset %s/%s: %w", b.opts.Namespace, name, err)
	}
	return pods.Items, nil
}

// ListRemote lists the LeaderWorkerSets trainyard made in the namespace.
func (b *Backend) ListRemote(ctx context.Context) ([]backends.RemoteWork, error) {
	return kubework.ListRemote(ctx, b.c, &lwsv1.LeaderWorkerSetList{}, b.opts.Namespace, Kind)
}

// Delete deletes one LeaderWorkerSet found by ListRemote, in the foreground.
func (b *Backend) Delete(ctx context.Context, w backends.RemoteWork) error {
	return kubework.DeleteRemote(ctx, b.c, &lwsv1.LeaderWorkerSet{}, w, b.opts.Namespace, Kind)
}

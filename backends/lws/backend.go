package lws

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	// Namespace is the prefix of the spoke namespaces, one per hub
	// namespace (see jobset.Options).
	Namespace string
	// Policy is what tenants may put in pod specs, and Binding gives the
	// agent its rights in each tenant namespace (see jobset.Options).
	Policy  kubework.PodPolicy
	Binding *kubework.TenantBinding
	// Egress is the Target's egress allowance (see jobset.Options).
	Egress []v1alpha1.EgressRule
	// TopologyLevels are the node labels Capacity groups free GPUs by.
	TopologyLevels []string
	// LiveReader reads the API server directly, so "not found" is true
	// before anyone acts on it (see jobset.Options).
	LiveReader client.Reader
	// Logs reads pod logs for Logs (nil: the backend reads no logs).
	Logs  kubernetes.Interface
	Clock clock.PassiveClock
	// Status, when set, is the agent's status endpoint (see
	// jobset.Options).
	Status *kubework.StatusAccess
}

// Backend runs Dispatches as LeaderWorkerSets on one spoke cluster.
type Backend struct {
	c          client.Client
	opts       Options
	namespaces *kubework.Namespaces
	// policy is opts.Policy until UpdateSettings replaces it.
	policy *kubework.LivePolicy
	// nodes reports the spoke's capacity: nodes and pod requests are the
	// same whichever workload API made the pods.
	nodes *jobset.Backend
}

var (
	_ backends.Backend      = (*Backend)(nil)
	_ backends.RemoteLister = (*Backend)(nil)
	_ backends.LogReader    = (*Backend)(nil)
	_ backends.StopBound    = (*Backend)(nil)
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
	ns := &kubework.Namespaces{Prefix: opts.Namespace, Level: opts.Policy.Level, Egress: opts.Egress, Binding: opts.Binding, Reader: opts.LiveReader,
		Status: opts.Status}
	return &Backend{c: c, opts: opts, namespaces: ns, policy: kubework.NewLivePolicy(opts.Policy),
		nodes: jobset.New(c, jobset.Options{Namespace: opts.Namespace, TopologyLevels: opts.TopologyLevels})}
}

// UpdateSettings applies a changed Target without a restart (see
// jobset.Backend.UpdateSettings).
func (b *Backend) UpdateSettings(s kubework.Settings) {
	b.policy.Store(s.Policy)
	b.namespaces.Update(s.Policy.Level, s.Egress)
}

// key is where d's LeaderWorkerSet is: its tenant's namespace, its remote name.
func (b *Backend) key(d *v1alpha1.Dispatch) client.ObjectKey {
	return client.ObjectKey{Namespace: kubework.NamespaceOf(b.opts.Namespace, d), Name: backends.RemoteName(d)}
}

// render renders d for this Target, with the agent's status endpoint.
func (b *Backend) render(d *v1alpha1.Dispatch, ns string) (*Rendered, error) {
	r, err := Render(d, jobset.RenderOptions{Namespace: ns, Policy: b.policy.Load()})
	if err == nil && b.opts.Status != nil {
		withTrainerStatus(r.LWS, b.opts.Status.Endpoint, d)
	}
	return r, err
}

// Capacity is the spoke's capacity, as the JobSet backend counts it.
func (b *Backend) Capacity(ctx context.Context) (*backends.Capacity, error) {
	return b.nodes.Capacity(ctx)
}

func (b *Backend) ref(key client.ObjectKey) *v1alpha1.RemoteRef {
	return &v1alpha1.RemoteRef{Kind: Kind, Namespace: key.Namespace, Name: key.Name}
}

func (b *Backend) reader() client.Reader {
	if b.opts.LiveReader != nil {
		return b.opts.LiveReader
	}
	return b.c
}

// get reads a LeaderWorkerSet, confirming a cached "not found" live.
func (b *Backend) get(ctx context.Context, key client.ObjectKey) (*lwsv1.LeaderWorkerSet, error) {
	lws := &lwsv1.LeaderWorkerSet{}
	return lws, kubework.Get(ctx, b.c, b.opts.LiveReader, key, lws)
}

// owned gets d's LeaderWorkerSet (see kubework.GetOwned).
func (b *Backend) owned(ctx context.Context, d *v1alpha1.Dispatch) (*lwsv1.LeaderWorkerSet, error) {
	lws := &lwsv1.LeaderWorkerSet{}
	if err := kubework.GetOwned(ctx, b.c, b.opts.LiveReader, kubework.NamespaceOf(b.opts.Namespace, d), d, lws, Kind); err != nil {
		return nil, err
	}
	return lws, nil
}

// Submit creates d's LeaderWorkerSet unless it exists; its name derives
// from the Workload UID and attempt only, so a repeated Submit never makes
// a second one. Companions (MPI keys, hostfile) are created after it,
// owned by it; an interrupted Submit's adopt creates those still missing.
func (b *Backend) Submit(ctx context.Context, d *v1alpha1.Dispatch) (*v1alpha1.RemoteRef, error) {
	key := b.key(d)
	existing, err := b.get(ctx, key)
	switch {
	case err == nil:
		// Adopt before rendering: work made earlier is kept even if this
		// agent would now render it differently.
		return b.adopt(ctx, existing, d, nil)
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("get leaderworkerset %s: %w", key, err)
	}
	r, err := b.render(d, key.Namespace)
	if err != nil {
		return nil, err
	}
	if _, err := b.namespaces.Ensure(ctx, b.c, d); err != nil {
		return nil, err
	}
	err = kubework.CreateRemote(ctx, b.c, r.LWS, "leaderworkerset")
	if errors.Is(err, kubework.ErrNamespaceGone) {
		b.namespaces.Forget(r.LWS.Namespace)
	}
	switch {
	case err == nil:
		if err := kubework.CreateCompanions(ctx, b.c, b.reader(), r.LWS, r.Companions); err != nil {
			return nil, err
		}
		return b.ref(key), nil
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
// companions (MPI's keys and hostfile, its NetworkPolicy) an interrupted
// Submit left out, from r (a fresh render when nil).
func (b *Backend) adopt(ctx context.Context, lws *lwsv1.LeaderWorkerSet, d *v1alpha1.Dispatch, r *Rendered) (*v1alpha1.RemoteRef, error) {
	if err := kubework.CheckOwned(lws, d); err != nil {
		return nil, err
	}
	if lws.DeletionTimestamp != nil {
		return nil, fmt.Errorf("leaderworkerset %s/%s is being deleted", lws.Namespace, lws.Name)
	}
	if r == nil {
		var err error
		if r, err = b.render(d, lws.Namespace); err != nil {
			return nil, err
		}
	}
	if err := kubework.CreateCompanions(ctx, b.c, b.reader(), lws, r.Companions); err != nil {
		return nil, err
	}
	return b.ref(client.ObjectKeyFromObject(lws)), nil
}

// Cancel deletes d's LeaderWorkerSet in the foreground; gone once it is
// NotFound and none of its pods is left.
func (b *Backend) Cancel(ctx context.Context, d *v1alpha1.Dispatch) (bool, error) {
	lws, err := b.owned(ctx, d)
	switch {
	case errors.Is(err, backends.ErrNotFound):
		pods, err := b.pods(ctx, b.key(d))
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

// pods lists the pods of the LeaderWorkerSet at key, leader and workers.
func (b *Backend) pods(ctx context.Context, key client.ObjectKey) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := b.c.List(ctx, &pods, client.InNamespace(key.Namespace),
		client.MatchingLabels{lwsv1.SetNameLabelKey: key.Name}); err != nil {
		return nil, fmt.Errorf("list pods of leaderworkerset %s: %w", key, err)
	}
	return pods.Items, nil
}

// ListRemote lists the LeaderWorkerSets trainyard made in the tenant namespaces.
func (b *Backend) ListRemote(ctx context.Context) ([]backends.RemoteWork, error) {
	return kubework.ListRemote(ctx, b.c, &lwsv1.LeaderWorkerSetList{}, b.opts.Namespace, Kind, hasEnded)
}

// hasEnded: Observe recorded the job's end (v1alpha1.AnnotationLeaderWorkerSetFinished) and scaled
// the set to zero in the same patch; its pods end within their grace,
// which StopWithin bounds. A set whose end Observe has not seen yet cannot
// be judged from the object (a LeaderWorkerSet has no notion of done: only
// its pods' containers tell), so it is not finished, and neither is one
// scaled up again since, whose pods run anew.
func hasEnded(o client.Object) bool {
	lws, ok := o.(*lwsv1.LeaderWorkerSet)
	if !ok {
		return false
	}
	_, recorded := lws.Annotations[v1alpha1.AnnotationLeaderWorkerSetFinished]
	return recorded && lws.Spec.Replicas != nil && *lws.Spec.Replicas == 0
}

// StopWithin bounds how long the pods of a LeaderWorkerSet live on after
// Cancel or Delete (see jobset.Backend.StopWithin).
func (b *Backend) StopWithin() time.Duration {
	return b.policy.Load().StopWithin()
}

// Delete deletes one LeaderWorkerSet found by ListRemote, in the foreground.
func (b *Backend) Delete(ctx context.Context, w backends.RemoteWork) error {
	return kubework.DeleteRemote(ctx, b.c, &lwsv1.LeaderWorkerSet{}, w, b.opts.Namespace, Kind)
}

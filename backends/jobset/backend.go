// Package jobset is the Kubernetes backend that runs a Dispatch on a spoke
// as a JobSet, rendered by Kubeflow Trainer's own runtime framework from the
// Dispatch's TrainJob and runtime snapshots.
package jobset

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
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/backends/kubework"
)

const (
	// Kind is the RemoteRef kind of this backend's work.
	Kind = "JobSet"
	// DefaultNamespace matches the Target API's default prefix of the
	// spoke namespaces.
	DefaultNamespace = kubework.DefaultNamespacePrefix
)

// ErrNotOwned: a JobSet with the Dispatch's remote name exists but was made
// for another Workload or attempt. The backend leaves it alone.
var ErrNotOwned = kubework.ErrNotOwned

// Options configure a Backend.
type Options struct {
	// Namespace is the prefix of the spoke namespaces (default
	// DefaultNamespace): each hub namespace's JobSets run in
	// kubework.TenantNamespace(Namespace, hub namespace).
	Namespace string
	// Policy is what tenants may put in pod specs: the Target's
	// podSecurity (which the tenant namespaces enforce) and allowedPodFields.
	// UpdateSettings replaces it.
	Policy kubework.PodPolicy
	// Egress is the Target's spec.kubernetes.networkPolicy.egress, made
	// into each tenant namespace's egress allowance.
	Egress []v1alpha1.EgressRule
	// Binding, when set, is bound in each tenant namespace the backend
	// makes, so the agent's write rights end at its tenant namespaces.
	Binding *kubework.TenantBinding
	// TopologyLevels are node label keys, widest first, that Capacity
	// groups nodes by; kubernetes.io/hostname is always the last level.
	TopologyLevels []string
	// Clock stamps start times no pod reports yet (default: real clock).
	Clock clock.PassiveClock
	// LiveReader, when the client reads from an informer cache, reads the
	// API server directly: a JobSet just created may not be in the cache
	// yet, and "not found" must be true before anyone acts on it.
	LiveReader client.Reader
	// Logs reads pod logs for Logs (nil: the backend reads no logs).
	Logs kubernetes.Interface
	// Status, when set, is the agent's status endpoint: trainer pods get
	// Trainer's status variables and token volume, and each tenant
	// namespace the CA and an egress exception to it.
	Status *kubework.StatusAccess
}

// Backend runs Dispatches as JobSets on one spoke cluster.
type Backend struct {
	c          client.Client
	opts       Options
	namespaces *kubework.Namespaces
	// policy is opts.Policy until UpdateSettings replaces it.
	policy *kubework.LivePolicy
}

var (
	_ backends.Backend      = (*Backend)(nil)
	_ backends.RemoteLister = (*Backend)(nil)
	_ backends.StopBound    = (*Backend)(nil)
)

// New returns a Backend acting through c, which may read from a cache (the
// agent passes its spoke manager's client); its scheme must know JobSets.
func New(c client.Client, opts Options) *Backend {
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	ns := &kubework.Namespaces{Prefix: opts.Namespace, Level: opts.Policy.Level, Egress: opts.Egress, Binding: opts.Binding, Reader: opts.LiveReader,
		Status: opts.Status}
	return &Backend{c: c, opts: opts, namespaces: ns, policy: kubework.NewLivePolicy(opts.Policy)}
}

// UpdateSettings applies a changed Target without a restart: the next
// render checks pods against s.Policy, and each tenant namespace gets the
// new Pod Security level and egress allowance at its next job.
func (b *Backend) UpdateSettings(s kubework.Settings) {
	b.policy.Store(s.Policy)
	b.namespaces.Update(s.Policy.Level, s.Egress)
}

func (b *Backend) ref(key client.ObjectKey) *v1alpha1.RemoteRef {
	return &v1alpha1.RemoteRef{Kind: Kind, Namespace: key.Namespace, Name: key.Name}
}

// key is where d's JobSet is on the spoke: its tenant's namespace, its remote name.
func (b *Backend) key(d *v1alpha1.Dispatch) client.ObjectKey {
	return client.ObjectKey{Namespace: kubework.NamespaceOf(b.opts.Namespace, d), Name: backends.RemoteName(d)}
}

// renderOptions render d for this backend's Target.
func (b *Backend) renderOptions(ns string) RenderOptions {
	return RenderOptions{Namespace: ns, Policy: b.policy.Load()}
}

// get reads a JobSet, confirming a cached "not found" with a live read.
func (b *Backend) get(ctx context.Context, key client.ObjectKey) (*jobsetv1alpha2.JobSet, error) {
	js := &jobsetv1alpha2.JobSet{}
	return js, kubework.Get(ctx, b.c, b.opts.LiveReader, key, js)
}

// Submit creates d's JobSet unless it exists. The name derives from the
// Workload UID and attempt only, so the API server's name uniqueness is what
// guarantees a retried or repeated Submit never makes a second JobSet.
func (b *Backend) Submit(ctx context.Context, d *v1alpha1.Dispatch) (*v1alpha1.RemoteRef, error) {
	key := b.key(d)
	// Adopt before rendering: work made earlier is kept even if this
	// agent's renderer would now render it differently.
	existing, err := b.get(ctx, key)
	switch {
	case err == nil:
		return b.adoptWithCompanions(ctx, existing, d)
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("get jobset %s: %w", key, err)
	}
	r, err := RenderAll(d, b.renderOptions(key.Namespace))
	if err != nil {
		return nil, err
	}
	if b.opts.Status != nil {
		withTrainerStatus(r.JobSet, b.opts.Status.Endpoint, d)
	}
	if _, err := b.namespaces.Ensure(ctx, b.c, d); err != nil {
		return nil, err
	}
	err = b.create(ctx, r.JobSet)
	switch {
	case err == nil:
		// The JobSet comes first, so its companions can be owned by it and
		// never outlive it; its pods wait for a missing Secret or ConfigMap
		// volume, and a crash here is mended by the next Submit's adopt.
		if err := b.createCompanions(ctx, r.JobSet, r.Companions); err != nil {
			return nil, err
		}
		return b.ref(key), nil
	case !apierrors.IsAlreadyExists(err):
		return nil, err
	}
	// An earlier Submit created it and its answer was lost, or our cache
	// had not caught up: read it (waiting for the cache) and adopt it.
	if existing, err = b.waitVisible(ctx, key); err != nil {
		return nil, err
	}
	return b.adoptWithCompanions(ctx, existing, d)
}

// adoptWithCompanions adopts js and creates whichever of its companions
// (MPI's or Flux's Secret and ConfigMap, its NetworkPolicy) an interrupted
// Submit left uncreated, from a fresh render.
func (b *Backend) adoptWithCompanions(ctx context.Context, js *jobsetv1alpha2.JobSet, d *v1alpha1.Dispatch) (*v1alpha1.RemoteRef, error) {
	ref, err := b.adopt(js, d)
	if err != nil {
		return ref, err
	}
	r, err := RenderAll(d, b.renderOptions(js.Namespace))
	if err != nil {
		return nil, err
	}
	if err := b.createCompanions(ctx, js, r.Companions); err != nil {
		return nil, err
	}
	return ref, nil
}

// createCompanions creates objs owned by js; those that exist are kept.
func (b *Backend) createCompanions(ctx context.Context, js *jobsetv1alpha2.JobSet, objs []client.Object) error {
	reader := b.opts.LiveReader
	if reader == nil {
		reader = b.c
	}
	return kubework.CreateCompanions(ctx, b.c, reader, js, objs)
}

// create creates js in its tenant namespace; a namespace found gone is
// made again by the next Submit.
func (b *Backend) create(ctx context.Context, js *jobsetv1alpha2.JobSet) error {
	err := kubework.CreateRemote(ctx, b.c, js, "jobset")
	if errors.Is(err, kubework.ErrNamespaceGone) {
		b.namespaces.Forget(js.Namespace)
	}
	return err
}

func (b *Backend) waitVisible(ctx context.Context, key client.ObjectKey) (*jobsetv1alpha2.JobSet, error) {
	js := &jobsetv1alpha2.JobSet{}
	return js, kubework.WaitVisible(ctx, b.c, b.opts.LiveReader, key, js, Kind)
}

func (b *Backend) adopt(js *jobsetv1alpha2.JobSet, d *v1alpha1.Dispatch) (*v1alpha1.RemoteRef, error) {
	if err := checkOwned(js, d); err != nil {
		return nil, err
	}
	if js.DeletionTimestamp != nil {
		return nil, fmt.Errorf("jobset %s/%s is being deleted", js.Namespace, js.Name)
	}
	return b.ref(client.ObjectKeyFromObject(js)), nil
}

// checkOwned reports whether js was made for d's Workload and attempt.
func checkOwned(js *jobsetv1alpha2.JobSet, d *v1alpha1.Dispatch) error {
	return kubework.CheckOwned(js, d)
}

// Cancel deletes d's JobSet in the foreground, so the garbage collector
// removes its Jobs and pods before it. It reports gone only once the JobSet
// is NotFound and no pod labelled with its name is left.
func (b *Backend) Cancel(ctx context.Context, d *v1alpha1.Dispatch) (bool, error) {
	key := b.key(d)
	js, err := b.get(ctx, key)
	switch {
	case apierrors.IsNotFound(err):
		return b.podsGone(ctx, key)
	case err != nil:
		return false, fmt.Errorf("get jobset %s: %w", key, err)
	}
	if err := checkOwned(js, d); err != nil {
		return false, err
	}
	if js.DeletionTimestamp == nil {
		if err := b.deleteForeground(ctx, js, &js.UID); err != nil {
			return false, err
		}
	}
	return false, nil
}

func (b *Backend) podsGone(ctx context.Context, key client.ObjectKey) (bool, error) {
	pods, err := b.pods(ctx, key)
	if err != nil {
		return false, err
	}
	return len(pods) == 0, nil
}

// pods lists the pods the JobSet controller made for the JobSet at key.
func (b *Backend) pods(ctx context.Context, key client.ObjectKey) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := b.c.List(ctx, &pods, client.InNamespace(key.Namespace),
		client.MatchingLabels{jobsetv1alpha2.JobSetNameKey: key.Name}); err != nil {
		return nil, fmt.Errorf("list pods of jobset %s: %w", key, err)
	}
	return pods.Items, nil
}

// deleteForeground deletes js; with uid set, only that very object.
func (b *Backend) deleteForeground(ctx context.Context, js *jobsetv1alpha2.JobSet, uid *types.UID) error {
	return kubework.DeleteForeground(ctx, b.c, js, uid, "jobset")
}

// ListRemote lists the JobSets trainyard made in the backend's tenant namespaces.
func (b *Backend) ListRemote(ctx context.Context) ([]backends.RemoteWork, error) {
	return kubework.ListRemote(ctx, b.c, &jobsetv1alpha2.JobSetList{}, b.opts.Namespace, Kind, hasEnded)
}

// hasEnded: the JobSet is Completed or Failed. The JobSet controller then
// deletes the Jobs still active (a success policy of Any, a failure), whose
// pods end within their grace, which StopWithin bounds.
func hasEnded(o client.Object) bool {
	js, ok := o.(*jobsetv1alpha2.JobSet)
	return ok && finishedCondition(js) != nil
}

// StopWithin bounds how long the pods of a JobSet live on after Cancel or
// Delete: the grace cap of the Target's current pod policy and
// backends.StopMargin (see kubework.PodPolicy.StopWithin).
func (b *Backend) StopWithin() time.Duration {
	return b.policy.Load().StopWithin()
}

// Delete deletes one JobSet found by ListRemote, in the foreground.
func (b *Backend) Delete(ctx context.Context, w backends.RemoteWork) error {
	return kubework.DeleteRemote(ctx, b.c, &jobsetv1alpha2.JobSet{}, w, b.opts.Namespace, Kind)
}

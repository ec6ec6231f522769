// Package jobset is the Kubernetes backend that runs a Dispatch on a spoke
// as a JobSet, rendered by Kubeflow Trainer's own runtime framework from the
// Dispatch's TrainJob and runtime snapshots.
package jobset

import (
	"context"
	"fmt"

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
	// DefaultNamespace matches the Target API's default spoke namespace.
	DefaultNamespace = "trainyard-jobs"
)

// ErrNotOwned: a JobSet with the Dispatch's remote name exists but was made
// for another Workload or attempt. The backend leaves it alone.
var ErrNotOwned = kubework.ErrNotOwned

// Options configure a Backend.
type Options struct {
	// Namespace on the spoke for the JobSets (default DefaultNamespace).
	Namespace string
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
}

// Backend runs Dispatches as JobSets on one spoke cluster.
type Backend struct {
	c    client.Client
	opts Options
}

var (
	_ backends.Backend      = (*Backend)(nil)
	_ backends.RemoteLister = (*Backend)(nil)
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
	return &Backend{c: c, opts: opts}
}

func (b *Backend) ref(name string) *v1alpha1.RemoteRef {
	return &v1alpha1.RemoteRef{Kind: Kind, Namespace: b.opts.Namespace, Name: name}
}

// get reads a JobSet, confirming a cached "not found" with a live read.
func (b *Backend) get(ctx context.Context, name string) (*jobsetv1alpha2.JobSet, error) {
	js := &jobsetv1alpha2.JobSet{}
	return js, kubework.Get(ctx, b.c, b.opts.LiveReader, client.ObjectKey{Namespace: b.opts.Namespace, Name: name}, js)
}

// Submit creates d's JobSet unless it exists. The name derives from the
// Workload UID and attempt only, so the API server's name uniqueness is what
// guarantees a retried or repeated Submit never makes a second JobSet.
func (b *Backend) Submit(ctx context.Context, d *v1alpha1.Dispatch) (*v1alpha1.RemoteRef, error) {
	name := backends.RemoteName(d)
	// Adopt before rendering: work made earlier is kept even if this
	// agent's renderer would now render it differently.
	existing, err := b.get(ctx, name)
	switch {
	case err == nil:
		return b.adoptWithCompanions(ctx, existing, d)
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("get jobset %s/%s: %w", b.opts.Namespace, name, err)
	}
	r, err := RenderAll(d, RenderOptions{Namespace: b.opts.Namespace})
	if err != nil {
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
		return b.ref(name), nil
	case !apierrors.IsAlreadyExists(err):
		return nil, err
	}
	// An earlier Submit created it and its answer was lost, or our cache
	// had not caught up: read it (waiting for the cache) and adopt it.
	if existing, err = b.waitVisible(ctx, name); err != nil {
		return nil, err
	}
	return b.adoptWithCompanions(ctx, existing, d)
}

// adoptWithCompanions adopts js and creates whichever of the objects its
// pods mount (MPI's or Flux's Secret and ConfigMap) an interrupted Submit left
// uncreated, from a fresh render.
func (b *Backend) adoptWithCompanions(ctx context.Context, js *jobsetv1alpha2.JobSet, d *v1alpha1.Dispatch) (*v1alpha1.RemoteRef, error) {
	ref, err := b.adopt(js, d)
	if err != nil || !mountsCompanions(js) {
		return ref, err
	}
	r, err := RenderAll(d, RenderOptions{Namespace: b.opts.Namespace})
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

// mountsCompanions reports whether js's pods mount a companion named after
// it (MPI's keys and hostfile, Flux's curve key and scripts).
func mountsCompanions(js *jobsetv1alpha2.JobSet) bool {
	specs := make([]*corev1.PodSpec, 0, len(js.Spec.ReplicatedJobs))
	for i := range js.Spec.ReplicatedJobs {
		specs = append(specs, &js.Spec.ReplicatedJobs[i].Template.Spec.Template.Spec)
	}
	return kubework.MountsCompanions(js.Name, specs...)
}

// create creates js, creating its namespace first if the API server says
// it is missing.
func (b *Backend) create(ctx context.Context, js *jobsetv1alpha2.JobSet) error {
	return kubework.CreateRemote(ctx, b.c, js, "jobset")
}

func (b *Backend) waitVisible(ctx context.Context, name string) (*jobsetv1alpha2.JobSet, error) {
	js := &jobsetv1alpha2.JobSet{}
	return js, kubework.WaitVisible(ctx, b.c, b.opts.LiveReader, client.ObjectKey{Namespace: b.opts.Namespace, Name: name}, js, Kind)
}

func (b *Backend) adopt(js *jobsetv1alpha2.JobSet, d *v1alpha1.Dispatch) (*v1alpha1.RemoteRef, error) {
	if err := checkOwned(js, d); err != nil {
		return nil, err
	}
	if js.DeletionTimestamp != nil {
		return nil, fmt.Errorf("jobset %s/%s is being deleted", js.Namespace, js.Name)
	}
	return b.ref(js.Name), nil
}

// checkOwned reports whether js was made for d's Workload and attempt.
func checkOwned(js *jobsetv1alpha2.JobSet, d *v1alpha1.Dispatch) error {
	return kubework.CheckOwned(js, d)
}

// Cancel deletes d's JobSet in the foreground, so the garbage collector
// removes its Jobs and pods before it. It reports gone only once the JobSet
// is NotFound and no pod labelled with its name is left.
func (b *Backend) Cancel(ctx context.Context, d *v1alpha1.Dispatch) (bool, error) {
	name := backends.RemoteName(d)
	js, err := b.get(ctx, name)
	switch {
	case apierrors.IsNotFound(err):
		return b.podsGone(ctx, name)
	case err != nil:
		return false, fmt.Errorf("get jobset %s/%s: %w", b.opts.Namespace, name, err)
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

func (b *Backend) podsGone(ctx context.Context, name string) (bool, error) {
	pods, err := b.pods(ctx, name)
	if err != nil {
		return false, err
	}
	return len(pods) == 0, nil
}

// pods lists the pods the JobSet controller made for the JobSet name.
func (b *Backend) pods(ctx context.Context, name string) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := b.c.List(ctx, &pods, client.InNamespace(b.opts.Namespace),
		client.MatchingLabels{jobsetv1alpha2.JobSetNameKey: name}); err != nil {
		return nil, fmt.Errorf("list pods of jobset %s/%s: %w", b.opts.Namespace, name, err)
	}
	return pods.Items, nil
}

// deleteForeground deletes js; with uid set, only that very object.
func (b *Backend) deleteForeground(ctx context.Context, js *jobsetv1alpha2.JobSet, uid *types.UID) error {
	return kubework.DeleteForeground(ctx, b.c, js, uid, "jobset")
}

// ListRemote lists the JobSets trainyard made in the backend's namespace.
func (b *Backend) ListRemote(ctx context.Context) ([]backends.RemoteWork, error) {
	return kubework.ListRemote(ctx, b.c, &jobsetv1alpha2.JobSetList{}, b.opts.Namespace, Kind)
}

// Delete deletes one JobSet found by ListRemote, in the foreground.
func (b *Backend) Delete(ctx context.Context, w backends.RemoteWork) error {
	return kubework.DeleteRemote(ctx, b.c, &jobsetv1alpha2.JobSet{}, w, b.opts.Namespace, Kind)
}

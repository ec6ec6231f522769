// Package jobset is the Kubernetes backend that runs a Dispatch on a spoke
// as a JobSet, rendered by Kubeflow Trainer's own runtime framework from the
// Dispatch's TrainJob and runtime snapshots.
package jobset

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
)

const (
	// Kind is the RemoteRef kind of this backend's work.
	Kind = "JobSet"
	// DefaultNamespace matches the Target API's default spoke namespace.
	DefaultNamespace = "trainyard-jobs"
	// adoptWait bounds how long Submit waits, after the API server said the
	// JobSet exists, for a cache-backed client to see it.
	adoptWait = 5 * time.Second
)

// ErrNotOwned: a JobSet with the Dispatch's remote name exists but was made
// for another Workload or attempt. The backend leaves it alone.
var ErrNotOwned = errors.New("jobset belongs to another workload or attempt")

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
	key := client.ObjectKey{Namespace: b.opts.Namespace, Name: name}
	err := b.c.Get(ctx, key, js)
	if apierrors.IsNotFound(err) && b.opts.LiveReader != nil {
		err = b.opts.LiveReader.Get(ctx, key, js)
	}
	return js, err
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
// pods mount (an MPI job's Secret and ConfigMap) an interrupted Submit left
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

// createCompanions creates objs owned by js; those that exist are kept (an
// MPI key pair, once made, is never replaced). Reads go to the API server,
// so the agent keeps no Secret informer.
func (b *Backend) createCompanions(ctx context.Context, js *jobsetv1alpha2.JobSet, objs []client.Object) error {
	reader := b.opts.LiveReader
	if reader == nil {
		reader = b.c
	}
	for _, o := range objs {
		probe, ok := o.DeepCopyObject().(client.Object)
		if !ok {
			return fmt.Errorf("cannot copy %T", o)
		}
		err := reader.Get(ctx, client.ObjectKeyFromObject(o), probe)
		if err == nil {
			continue
		}
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("get %T %s/%s: %w", o, o.GetNamespace(), o.GetName(), err)
		}
		if err := controllerutil.SetControllerReference(js, o, b.c.Scheme()); err != nil {
			return err
		}
		if err := b.c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			// The error names the object, never its data (a private key).
			return fmt.Errorf("create %T %s/%s for jobset %s: %w", o, o.GetNamespace(), o.GetName(), js.Name, err)
		}
	}
	return nil
}

// mountsCompanions reports whether js's pods mount an MPI Secret or
// hostfile ConfigMap named after it.
func mountsCompanions(js *jobsetv1alpha2.JobSet) bool {
	for _, rj := range js.Spec.ReplicatedJobs {
		for _, v := range rj.Template.Spec.Template.Spec.Volumes {
			if (v.Secret != nil && strings.HasPrefix(v.Secret.SecretName, js.Name)) ||
				(v.ConfigMap != nil && strings.HasPrefix(v.ConfigMap.Name, js.Name)) {
				return true
			}
		}
	}
	return false
}

// create creates js, creating its namespace first if the API server says
// it is missing. Reacting to the error costs no read on the common path and
// needs no namespace watch in a cache-backed client.
func (b *Backend) create(ctx context.Context, js *jobsetv1alpha2.JobSet) error {
	err := b.c.Create(ctx, js)
	if isNamespaceNotFound(err) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: js.Namespace}}
		if err := b.c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create namespace %s: %w", js.Namespace, err)
		}
		err = b.c.Create(ctx, js.DeepCopy())
	}
	if apierrors.IsInvalid(err) {
		// The spoke's JobSet validation refuses the rendered job; the same
		// Dispatch will always render the same JobSet.
		return fmt.Errorf("%w: jobset %s/%s: %w", backends.ErrRejected, js.Namespace, js.Name, err)
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create jobset %s/%s: %w", js.Namespace, js.Name, err)
	}
	return err
}

func isNamespaceNotFound(err error) bool {
	var status apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &status) {
		return false
	}
	details := status.Status().Details
	return details != nil && details.Kind == "namespaces"
}

func (b *Backend) waitVisible(ctx context.Context, name string) (*jobsetv1alpha2.JobSet, error) {
	var js *jobsetv1alpha2.JobSet
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, adoptWait, true, func(ctx context.Context) (bool, error) {
		var err error
		js, err = b.get(ctx, name)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return nil, fmt.Errorf("jobset %s/%s exists but cannot be read yet: %w", b.opts.Namespace, name, err)
	}
	return js, nil
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
	uid, attempt := js.Labels[backends.LabelWorkloadUID], js.Labels[backends.LabelAttempt]
	if uid != string(d.Spec.Workload.UID) || attempt != strconv.Itoa(int(d.Spec.Attempt)) {
		return fmt.Errorf("%w: %s/%s has workload %q attempt %q, dispatch %s/%s wants %q attempt %d",
			ErrNotOwned, js.Namespace, js.Name, uid, attempt, d.Namespace, d.Name, d.Spec.Workload.UID, d.Spec.Attempt)
	}
	return nil
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
	opts := []client.DeleteOption{client.PropagationPolicy(metav1.DeletePropagationForeground)}
	if uid != nil {
		opts = append(opts, client.Preconditions{UID: uid})
	}
	if err := b.c.Delete(ctx, js, opts...); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete jobset %s/%s: %w", js.Namespace, js.Name, err)
	}
	return nil
}

// ListRemote lists the JobSets trainyard made in the backend's namespace.
// A JobSet whose attempt label does not parse is listed with attempt 0, so
// the agent treats it as stale.
func (b *Backend) ListRemote(ctx context.Context) ([]backends.RemoteWork, error) {
	var list jobsetv1alpha2.JobSetList
	if err := b.c.List(ctx, &list, client.InNamespace(b.opts.Namespace),
		client.MatchingLabels{backends.LabelManagedBy: backends.ManagedByValue}); err != nil {
		return nil, fmt.Errorf("list jobsets in %s: %w", b.opts.Namespace, err)
	}
	work := make([]backends.RemoteWork, 0, len(list.Items))
	for _, js := range list.Items {
		attempt, _ := strconv.ParseInt(js.Labels[backends.LabelAttempt], 10, 32)
		work = append(work, backends.RemoteWork{
			Ref:               v1alpha1.RemoteRef{Kind: Kind, Namespace: js.Namespace, Name: js.Name},
			DispatchNamespace: js.Labels[backends.LabelDispatchNamespace],
			DispatchName:      js.Labels[backends.LabelDispatchName],
			Attempt:           int32(attempt),
		})
	}
	return work, nil
}

// Delete deletes one JobSet found by ListRemote, in the foreground.
func (b *Backend) Delete(ctx context.Context, w backends.RemoteWork) error {
	if w.Ref.Kind != Kind {
		return fmt.Errorf("jobset backend cannot delete a %s", w.Ref.Kind)
	}
	ns := w.Ref.Namespace
	if ns == "" {
		ns = b.opts.Namespace
	}
	js := &jobsetv1alpha2.JobSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: w.Ref.Name}}
	return b.deleteForeground(ctx, js, nil)
}

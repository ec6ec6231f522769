// Package kubework holds what the Kubernetes spoke backends (JobSet,
// LeaderWorkerSet) do alike with their remote work: create it (and its
// namespace), own and adopt it, make its companions, delete and list it,
// and read its pods' output.
package kubework

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
)

// ErrNotOwned: remote work with the Dispatch's remote name exists but was
// made for another Workload or attempt. The backend leaves it alone.
var ErrNotOwned = errors.New("remote work belongs to another workload or attempt")

// CreateCompanions creates objs controlled by owner; those that exist are
// kept (an MPI key pair, once made, is never replaced). Reads go through
// reader, the API server for the agent, so it keeps no Secret informer.
func CreateCompanions(ctx context.Context, c client.Client, reader client.Reader, owner client.Object, objs []client.Object) error {
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
		if err := controllerutil.SetControllerReference(owner, o, c.Scheme()); err != nil {
			return err
		}
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			// The error names the object, never its data (a private key).
			return fmt.Errorf("create %T %s/%s for %s: %w", o, o.GetNamespace(), o.GetName(), owner.GetName(), err)
		}
	}
	return nil
}

// ErrNamespaceGone: the tenant namespace of remote work is gone (deleted
// since the agent made it ready). The caller forgets it was ready, so the
// next Submit makes it again, labels and NetworkPolicies included.
var ErrNamespaceGone = errors.New("tenant namespace is gone")

// CreateRemote creates obj (a kind of remote work) in its tenant namespace,
// which the caller made ready (Namespaces.Ensure); on success obj is the
// created object, UID included. A namespace the API server says is missing
// is never made here, bare: the error wraps ErrNamespaceGone. An object the
// spoke's validation refuses is rejected for good: the same Dispatch always
// renders the same object. AlreadyExists is returned as is, for the caller
// to adopt.
func CreateRemote(ctx context.Context, c client.Client, obj client.Object, kind string) error {
	err := c.Create(ctx, obj)
	if isNamespaceNotFound(err) {
		return fmt.Errorf("create %s %s/%s: %w: %w", kind, obj.GetNamespace(), obj.GetName(), ErrNamespaceGone, err)
	}
	if apierrors.IsInvalid(err) {
		return fmt.Errorf("%w: %s %s/%s: %w", backends.ErrRejected, kind, obj.GetNamespace(), obj.GetName(), err)
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create %s %s/%s: %w", kind, obj.GetNamespace(), obj.GetName(), err)
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

// CheckOwned reports whether remote work obj was made for d's Workload and
// attempt, wrapping ErrNotOwned when it was not.
func CheckOwned(obj metav1.Object, d *v1alpha1.Dispatch) error {
	l := obj.GetLabels()
	uid, attempt := l[backends.LabelWorkloadUID], l[backends.LabelAttempt]
	if uid != string(d.Spec.Workload.UID) || attempt != strconv.Itoa(int(d.Spec.Attempt)) {
		return fmt.Errorf("%w: %s/%s has workload %q attempt %q, dispatch %s/%s wants %q attempt %d",
			ErrNotOwned, obj.GetNamespace(), obj.GetName(), uid, attempt, d.Namespace, d.Name, d.Spec.Workload.UID, d.Spec.Attempt)
	}
	return nil
}

// DeleteForeground deletes obj so that the garbage collector removes what
// it owns first; with uid set, only that very object.
func DeleteForeground(ctx context.Context, c client.Client, obj client.Object, uid *types.UID, kind string) error {
	opts := []client.DeleteOption{client.PropagationPolicy(metav1.DeletePropagationForeground)}
	if uid != nil {
		opts = append(opts, client.Preconditions{UID: uid})
	}
	if err := c.Delete(ctx, obj, opts...); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete %s %s/%s: %w", kind, obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// RemoteWorkOf is obj as the agent's fence sees it: the Dispatch its labels
// name. An attempt label that does not parse reads as attempt 0, so the
// agent treats the work as stale.
func RemoteWorkOf(obj metav1.Object, kind string) backends.RemoteWork {
	l := obj.GetLabels()
	attempt, _ := strconv.ParseInt(l[backends.LabelAttempt], 10, 32)
	return backends.RemoteWork{
		Ref:               v1alpha1.RemoteRef{Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName()},
		DispatchNamespace: l[v1alpha1.LabelDispatchNamespace],
		DispatchName:      l[v1alpha1.LabelDispatchName],
		Attempt:           int32(attempt),
	}
}

// ListRemote lists the objects of list's kind that trainyard made in the
// tenant namespaces of prefix (see IsTenantNamespace), as remote work;
// finished (nil: never) says which of them have ended, so a lease fence
// keeps them and their record of how the job ended.
func ListRemote(ctx context.Context, c client.Client, list client.ObjectList, prefix, kind string, finished func(client.Object) bool) ([]backends.RemoteWork, error) {
	if err := c.List(ctx, list, client.MatchingLabels{backends.LabelManagedBy: backends.ManagedByValue}); err != nil {
		return nil, fmt.Errorf("list %ss: %w", strings.ToLower(kind), err)
	}
	items, err := apimeta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	work := make([]backends.RemoteWork, 0, len(items))
	for _, o := range items {
		obj, ok := o.(client.Object)
		if !ok {
			return nil, fmt.Errorf("list %ss: %T is not an object", strings.ToLower(kind), o)
		}
		if !IsTenantNamespace(prefix, obj.GetNamespace()) {
			continue
		}
		w := RemoteWorkOf(obj, kind)
		w.Finished = finished != nil && finished(obj)
		work = append(work, w)
	}
	return work, nil
}

// DeleteRemote deletes, in the foreground, one piece of remote work that
// ListRemote found; empty is an empty object of its kind.
func DeleteRemote(ctx context.Context, c client.Client, empty client.Object, w backends.RemoteWork, namespace, kind string) error {
	if w.Ref.Kind != kind {
		return fmt.Errorf("the %s backend cannot delete a %s", kind, w.Ref.Kind)
	}
	if w.Ref.Namespace != "" {
		namespace = w.Ref.Namespace
	}
	empty.SetNamespace(namespace)
	empty.SetName(w.Ref.Name)
	return DeleteForeground(ctx, c, empty, nil, strings.ToLower(kind))
}

// Get reads obj at key through c, which may be a cache, and confirms a
// "not found" with live (when set): work just created may not be cached
// yet, and "not found" must be true before anyone acts on it.
func Get(ctx context.Context, c, live client.Reader, key client.ObjectKey, obj client.Object) error {
	err := c.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) && live != nil {
		err = live.Get(ctx, key, obj)
	}
	return err
}

// GetOwned reads d's remote work of kind in namespace into obj. It wraps
// backends.ErrNotFound when there is none and ErrNotOwned when the object of
// that name was made for another Dispatch.
func GetOwned(ctx context.Context, c, live client.Reader, namespace string, d *v1alpha1.Dispatch, obj client.Object, kind string) error {
	name := backends.RemoteName(d)
	err := Get(ctx, c, live, client.ObjectKey{Namespace: namespace, Name: name}, obj)
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%s %s/%s: %w", strings.ToLower(kind), namespace, name, backends.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("get %s %s/%s: %w", strings.ToLower(kind), namespace, name, err)
	}
	return CheckOwned(obj, d)
}

// AdoptWait bounds how long Submit waits, after the API server said the
// remote work already exists, for it to be readable.
const AdoptWait = 5 * time.Second

// WaitVisible waits up to AdoptWait until obj at key can be read: it
// exists (create said so) but a cache may not have it yet.
func WaitVisible(ctx context.Context, c, live client.Reader, key client.ObjectKey, obj client.Object, kind string) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, AdoptWait, true, func(ctx context.Context) (bool, error) {
		err := Get(ctx, c, live, key, obj)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return fmt.Errorf("%s %s/%s exists but cannot be read yet: %w", strings.ToLower(kind), key.Namespace, key.Name, err)
	}
	return nil
}

// ContainerNamed is want when spec has a container of that name (or none
// at all), else the name of its first container: where a trainer runs when
// a runtime renamed Trainer's "node" container.
func ContainerNamed(spec *corev1.PodSpec, want string) string {
	if len(spec.Containers) == 0 || slices.ContainsFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == want }) {
		return want
	}
	return spec.Containers[0].Name
}

// EarliestStart is the first start time among pods.
func EarliestStart(pods []corev1.Pod) *metav1.Time {
	var first *metav1.Time
	for i := range pods {
		if s := pods[i].Status.StartTime; s != nil && (first == nil || s.Before(first)) {
			first = s.DeepCopy()
		}
	}
	return first
}

// ReadContainerLogs reads the end of one container's output through the
// API server's pods/log (which asks the pod's kubelet).
func ReadContainerLogs(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, container string, o backends.LogOptions) (*backends.Logs, error) {
	source := fmt.Sprintf("pod %s/%s container %s", pod.Namespace, pod.Name, container)
	if pod.Status.Phase == corev1.PodPending && !started(pod, container) {
		return nil, fmt.Errorf("%w: %s has not started yet (pod pending)", backends.ErrNotFound, source)
	}
	po := &corev1.PodLogOptions{Container: container}
	if o.TailLines > 0 {
		// One more line than asked for tells whether older output exists.
		po.TailLines = ptrTo(o.TailLines + 1)
	}
	// The API server's limitBytes keeps the beginning, and Logs keeps the
	// end: stream instead, holding only the last LimitBytes.
	stream, err := cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, po).Stream(ctx)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: %s: %w", backends.ErrNotFound, source, err)
	}
	if err != nil {
		return nil, fmt.Errorf("read logs of %s: %w", source, err)
	}
	defer stream.Close()
	data, dropped, err := readTail(stream, o.LimitBytes)
	if err != nil {
		return nil, fmt.Errorf("read logs of %s: %w", source, err)
	}
	out, truncated := backends.TailOf(data, o.TailLines, o.LimitBytes)
	return &backends.Logs{Source: source, Data: out, Truncated: truncated || dropped}, nil
}

// started reports whether container has run at all.
func started(p *corev1.Pod, container string) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == container {
			return cs.State.Running != nil || cs.State.Terminated != nil || cs.LastTerminationState.Terminated != nil
		}
	}
	return false
}

// readTail reads r to its end keeping at least its last limit bytes (all
// when limit is 0) and reports whether it dropped any of it.
func readTail(r io.Reader, limit int64) (data []byte, dropped bool, err error) {
	if limit <= 0 {
		data, err = io.ReadAll(r)
		return data, false, err
	}
	buf := make([]byte, 0, 2*limit+1)
	chunk := make([]byte, 32*1024)
	for {
		n, err := r.Read(chunk)
		buf = append(buf, chunk[:n]...)
		if int64(len(buf)) > 2*limit {
			// Keep one byte more than limit, so TailOf still starts its
			// cut at a line boundary.
			buf = append(buf[:0], buf[int64(len(buf))-limit-1:]...)
			dropped = true
		}
		if errors.Is(err, io.EOF) {
			return buf, dropped, nil
		}
		if err != nil {
			return nil, dropped, err
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

package spoke

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
)

// LogsReconciler answers `trainyard logs` requests on the agent's
// Dispatches (v1alpha1.AnnotationLogsRequest) by reading the output through
// the backend and writing it into the Dispatch's logs ConfigMap on the hub.
// Only the hub (and administrators) may write Dispatches: the hub relays a
// tenant's LogRequest once a SubjectAccessReview of its requester allows
// it, so the agent answers what it finds there.
type LogsReconciler struct {
	// Hub reads Dispatches (cached) and writes answers.
	Hub client.Client
	// Answers reads answer ConfigMaps uncached, so the agent needs no
	// ConfigMap informer on the hub.
	Answers client.Reader
	Backend backends.Backend
}

// SetupWithManager registers the reconciler; it wakes only on Dispatches
// whose request annotation is set or changed.
func (r *LogsReconciler) SetupWithManager(mgr ctrl.Manager, target string) error {
	changed := predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return e.Object.GetAnnotations()[v1alpha1.AnnotationLogsRequest] != "" },
		UpdateFunc: func(e event.UpdateEvent) bool {
			req := e.ObjectNew.GetAnnotations()[v1alpha1.AnnotationLogsRequest]
			return req != "" && req != e.ObjectOld.GetAnnotations()[v1alpha1.AnnotationLogsRequest]
		},
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	return ctrl.NewControllerManagedBy(mgr).Named("trainyard-agent-logs-"+target).
		For(&v1alpha1.Dispatch{}, builder.WithPredicates(changed)).
		Complete(r)
}

func (r *LogsReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var d v1alpha1.Dispatch
	if err := r.Hub.Get(ctx, req.NamespacedName, &d); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	raw := d.Annotations[v1alpha1.AnnotationLogsRequest]
	if raw == "" || !d.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	var lr v1alpha1.LogsRequest
	if err := json.Unmarshal([]byte(raw), &lr); err != nil || lr.ID == "" {
		// Nothing to answer to without an ID; the requester times out and
		// says so. The log line helps whoever wrote the annotation by hand.
		ctrl.LoggerFrom(ctx).Info("ignoring malformed logs request", "dispatch", req.NamespacedName, "error", err)
		return ctrl.Result{}, nil
	}
	// Who asked, for the agent's log; never the output.
	ctrl.LoggerFrom(ctx).V(1).Info("logs request", "dispatch", req.NamespacedName, "logRequest", lr.LogRequest, "replica", lr.Replica)
	answer := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: v1alpha1.LogsAnswerName(d.Name)}}
	var existing corev1.ConfigMap
	err := r.Answers.Get(ctx, client.ObjectKeyFromObject(answer), &existing)
	switch {
	case err == nil && existing.Annotations[v1alpha1.AnnotationLogsRequestID] == lr.ID:
		return ctrl.Result{}, nil // answered already
	case err != nil && !apierrors.IsNotFound(err):
		return ctrl.Result{}, err
	}
	logs, readErr := r.read(ctx, &d, lr)
	answer.Labels = map[string]string{v1alpha1.LabelTarget: v1alpha1.LabelValue(d.Spec.TargetName)}
	answer.Annotations = map[string]string{v1alpha1.AnnotationLogsRequestID: lr.ID}
	if readErr != nil {
		// Every failure is answered, a passing one too (the backend is
		// unreachable): the user sees why at once and can ask again.
		answer.Annotations[v1alpha1.AnnotationLogsError] = readErr.Error()
	} else {
		answer.Annotations[v1alpha1.AnnotationLogsSource] = logs.Source
		answer.Annotations[v1alpha1.AnnotationLogsTruncated] = strconv.FormatBool(logs.Truncated)
		answer.Data = map[string]string{v1alpha1.LogsDataKey: text(logs.Data)}
	}
	if err := controllerutil.SetOwnerReference(&d, answer, r.Hub.Scheme()); err != nil {
		return ctrl.Result{}, err
	}
	if apierrors.IsNotFound(err) {
		return ctrl.Result{}, client.IgnoreAlreadyExists(r.Hub.Create(ctx, answer))
	}
	answer.ResourceVersion = existing.ResourceVersion
	return ctrl.Result{}, r.Hub.Update(ctx, answer)
}

func (r *LogsReconciler) read(ctx context.Context, d *v1alpha1.Dispatch, lr v1alpha1.LogsRequest) (*backends.Logs, error) {
	reader, ok := r.Backend.(backends.LogReader)
	if !ok {
		return nil, fmt.Errorf("the backend of target %s cannot read logs", d.Spec.TargetName)
	}
	if d.Status.Remote == nil {
		return nil, fmt.Errorf("dispatch %s has no remote work yet (phase %s)", d.Name, d.Status.Phase)
	}
	limit := lr.LimitBytes
	if limit <= 0 || limit > v1alpha1.MaxLogsBytes {
		limit = v1alpha1.MaxLogsBytes
	}
	return reader.Logs(ctx, d, backends.LogOptions{Replica: lr.Replica, TailLines: lr.TailLines, LimitBytes: limit})
}

// text makes output storable as ConfigMap data, which must be UTF-8:
// invalid bytes (a binary progress bar, a cut multi-byte rune) become U+FFFD.
func text(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]rune, 0, len(b))
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		out = append(out, r)
		b = b[n:]
	}
	return string(out)
}

package tenantview

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/internal/text"
)

// Defaults of the Relay.
const (
	// DefaultLogRequestTTL is how long an answered LogRequest is kept.
	DefaultLogRequestTTL = 10 * time.Minute
	// DefaultAnswerTimeout is how long the hub waits for an agent's answer.
	DefaultAnswerTimeout = 30 * time.Second
	// pollInterval is how often the hub looks for the answer.
	pollInterval = 500 * time.Millisecond
)

// Relay answers LogRequests: it authorizes the requester, relays the
// request to the agent of the TrainJob's live Dispatch and copies the
// agent's answer into the LogRequest's status.
type Relay struct {
	// Client reads LogRequests, TrainJobs, Workloads and Dispatches
	// (cached), creates SubjectAccessReviews and writes.
	Client client.Client
	// Answers reads the agents' answer ConfigMaps, and the requester
	// policy, uncached, so the hub keeps no informer of either.
	Answers client.Reader
	Clock   clock.PassiveClock
	// TTL and AnswerTimeout default to DefaultLogRequestTTL and
	// DefaultAnswerTimeout.
	TTL           time.Duration
	AnswerTimeout time.Duration
}

// SetupWithManager registers the relay.
func (r *Relay) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.TTL <= 0 {
		r.TTL = DefaultLogRequestTTL
	}
	if r.AnswerTimeout <= 0 {
		r.AnswerTimeout = DefaultAnswerTimeout
	}
	return ctrl.NewControllerManagedBy(mgr).Named("trainyard-logrequests").For(&v1alpha1.LogRequest{}).Complete(r)
}

// Reconcile moves one LogRequest on: expire, relay, or collect the answer.
func (r *Relay) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var lr v1alpha1.LogRequest
	if err := r.Client.Get(ctx, req.NamespacedName, &lr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !lr.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	if lr.Status.Phase.IsFinal() {
		return r.expire(ctx, &lr)
	}
	orig := lr.DeepCopy()
	var (
		res ctrl.Result
		err error
	)
	if lr.Status.RelayedAt == nil {
		res, err = r.relay(ctx, &lr)
	} else {
		res, err = r.collect(ctx, &lr)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if lr.Status.Phase.IsFinal() {
		lr.Status.CompletionTime = &metav1.Time{Time: r.Clock.Now()}
		res = ctrl.Result{RequeueAfter: r.TTL}
	}
	if statusEqual(orig, &lr) {
		return res, nil
	}
	return res, r.Client.Status().Patch(ctx, &lr, client.MergeFrom(orig))
}

func statusEqual(a, b *v1alpha1.LogRequest) bool {
	x, _ := json.Marshal(a.Status)
	y, _ := json.Marshal(b.Status)
	return string(x) == string(y)
}

// expire deletes a final LogRequest once its TTL has passed.
func (r *Relay) expire(ctx context.Context, lr *v1alpha1.LogRequest) (ctrl.Result, error) {
	done := lr.CreationTimestamp.Time
	if lr.Status.CompletionTime != nil {
		done = lr.Status.CompletionTime.Time
	}
	if left := done.Add(r.TTL).Sub(r.Clock.Now()); left > 0 {
		return ctrl.Result{RequeueAfter: left}, nil
	}
	return ctrl.Result{}, client.IgnoreNotFound(r.Client.Delete(ctx, lr))
}

func finish(lr *v1alpha1.LogRequest, phase v1alpha1.LogRequestPhase, msg string) {
	lr.Status.Phase, lr.Status.Message = phase, text.Truncate(msg, 4096)
}

// relay authorizes lr and writes it onto the live Dispatch.
func (r *Relay) relay(ctx context.Context, lr *v1alpha1.LogRequest) (ctrl.Result, error) {
	why, err := policyMissing(ctx, r.Answers)
	if err == nil && why == "" {
		why, err = authorize(ctx, r.Client, lr)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if why != "" {
		finish(lr, v1alpha1.LogRequestDenied, why)
		return ctrl.Result{}, nil
	}
	d, msg, err := r.liveDispatch(ctx, lr)
	if err != nil || d == nil {
		if err == nil {
			finish(lr, v1alpha1.LogRequestFailed, msg)
		}
		return ctrl.Result{}, err
	}
	lr.Status.Phase, lr.Status.Target = v1alpha1.LogRequestPending, d.Spec.TargetName
	now := r.Clock.Now()
	if busy := pendingOther(d, lr, now); busy > 0 {
		// One request per Dispatch at a time: wait for the other's answer.
		return ctrl.Result{RequeueAfter: min(busy, pollInterval)}, nil
	}
	ask := v1alpha1.LogsRequest{
		ID: string(lr.UID), LogRequest: lr.Namespace + "/" + lr.Name, Replica: lr.Spec.Replica,
		TailLines: lr.Spec.TailLines, LimitBytes: lr.Spec.LimitBytes,
		Deadline: &metav1.Time{Time: now.Add(r.AnswerTimeout)},
	}
	raw, err := json.Marshal(ask)
	if err != nil {
		return ctrl.Result{}, err
	}
	patch := client.MergeFromWithOptions(d.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if d.Annotations == nil {
		d.Annotations = map[string]string{}
	}
	d.Annotations[v1alpha1.AnnotationLogsRequest] = string(raw)
	if err := r.Client.Patch(ctx, d, patch); err != nil {
		return ctrl.Result{}, err
	}
	lr.Status.RelayedAt = &metav1.Time{Time: now}
	return ctrl.Result{RequeueAfter: pollInterval}, nil
}

// pendingOther is how long the request of another LogRequest on d may
// still wait for its answer (0: none is pending).
func pendingOther(d *v1alpha1.Dispatch, lr *v1alpha1.LogRequest, now time.Time) time.Duration {
	raw := d.Annotations[v1alpha1.AnnotationLogsRequest]
	if raw == "" {
		return 0
	}
	var other v1alpha1.LogsRequest
	if err := json.Unmarshal([]byte(raw), &other); err != nil || other.ID == string(lr.UID) || other.Deadline == nil {
		return 0
	}
	return max(0, other.Deadline.Sub(now))
}

// collect copies the agent's answer into lr once it has come.
func (r *Relay) collect(ctx context.Context, lr *v1alpha1.LogRequest) (ctrl.Result, error) {
	d, msg, err := r.liveDispatch(ctx, lr)
	if err != nil {
		return ctrl.Result{}, err
	}
	if d == nil {
		finish(lr, v1alpha1.LogRequestFailed, msg)
		return ctrl.Result{}, nil
	}
	var cm corev1.ConfigMap
	err = r.Answers.Get(ctx, client.ObjectKey{Namespace: d.Namespace, Name: v1alpha1.LogsAnswerName(d.Name)}, &cm)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	if err != nil || cm.Annotations[v1alpha1.AnnotationLogsRequestID] != string(lr.UID) {
		if r.Clock.Since(lr.Status.RelayedAt.Time) >= r.AnswerTimeout {
			finish(lr, v1alpha1.LogRequestFailed, fmt.Sprintf("the agent of target %s did not answer within %s", d.Spec.TargetName, r.AnswerTimeout))
			return ctrl.Result{}, r.release(ctx, d, lr, nil)
		}
		return ctrl.Result{RequeueAfter: pollInterval}, nil
	}
	if msg := cm.Annotations[v1alpha1.AnnotationLogsError]; msg != "" {
		finish(lr, v1alpha1.LogRequestFailed, fmt.Sprintf("target %s: %s", d.Spec.TargetName, msg))
	} else {
		finish(lr, v1alpha1.LogRequestAnswered, "")
		lr.Status.Source = text.Truncate(cm.Annotations[v1alpha1.AnnotationLogsSource], 1024)
		lr.Status.Truncated = cm.Annotations[v1alpha1.AnnotationLogsTruncated] == "true"
		lr.Status.Log = cm.Data[v1alpha1.LogsDataKey]
		if len(lr.Status.Log) > v1alpha1.MaxLogsBytes {
			lr.Status.Log, lr.Status.Truncated = tail(lr.Status.Log, v1alpha1.MaxLogsBytes), true
		}
	}
	return ctrl.Result{}, r.release(ctx, d, lr, &cm)
}

// release removes lr's request from d and deletes its answer, so the
// output is kept in the LogRequest only and the next request need not wait.
func (r *Relay) release(ctx context.Context, d *v1alpha1.Dispatch, lr *v1alpha1.LogRequest, answer *corev1.ConfigMap) error {
	if answer != nil {
		err := r.Client.Delete(ctx, answer, client.Preconditions{UID: &answer.UID, ResourceVersion: &answer.ResourceVersion})
		switch {
		case apierrors.IsForbidden(err):
			// The hub deletes ConfigMaps only where the agent namespace's
			// RBAC (targets.AgentRBAC) lets it. Without it the answer stays
			// until the next one replaces it or its Dispatch goes; the
			// tenant still gets this one.
			ctrl.LoggerFrom(ctx).Info("may not delete a log answer; apply the agent namespace's RBAC of hub/targets.AgentRBAC",
				"namespace", answer.Namespace, "configMap", answer.Name)
		case client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err):
			return err
		}
	}
	var ours v1alpha1.LogsRequest
	if json.Unmarshal([]byte(d.Annotations[v1alpha1.AnnotationLogsRequest]), &ours) != nil || ours.ID != string(lr.UID) {
		return nil
	}
	patch := client.MergeFromWithOptions(d.DeepCopy(), client.MergeFromWithOptimisticLock{})
	delete(d.Annotations, v1alpha1.AnnotationLogsRequest)
	return client.IgnoreNotFound(r.Client.Patch(ctx, d, patch))
}

// liveDispatch finds the Dispatch running lr's TrainJob now; when there is
// none it says why in msg.
func (r *Relay) liveDispatch(ctx context.Context, lr *v1alpha1.LogRequest) (d *v1alpha1.Dispatch, msg string, err error) {
	var tj trainer.TrainJob
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: lr.Namespace, Name: lr.Spec.TrainJobName}, &tj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Sprintf("trainjob %q not found in namespace %q", lr.Spec.TrainJobName, lr.Namespace), nil
		}
		return nil, "", err
	}
	var wls kueue.WorkloadList
	if err := r.Client.List(ctx, &wls, client.InNamespace(tj.Namespace)); err != nil {
		return nil, "", err
	}
	wl := workloadOf(&tj, wls.Items)
	if wl == nil {
		return nil, fmt.Sprintf("trainjob %s/%s has no Kueue Workload yet", tj.Namespace, tj.Name), nil
	}
	var ds v1alpha1.DispatchList
	if err := r.Client.List(ctx, &ds, client.MatchingLabels{v1alpha1.LabelWorkloadUID: string(wl.UID)}); err != nil {
		return nil, "", err
	}
	if d := live(wl, ds.Items); d != nil {
		return d, "", nil
	}
	return nil, fmt.Sprintf("trainjob %s/%s runs nowhere now", tj.Namespace, tj.Name), nil
}

// workloadOf is the Workload of tj Kueue works on: not being deleted, the
// newest of several.
func workloadOf(tj *trainer.TrainJob, wls []kueue.Workload) *kueue.Workload {
	var best *kueue.Workload
	for i := range wls {
		wl := &wls[i]
		if !metav1.IsControlledBy(wl, tj) && !ownedBy(wl, tj) {
			continue
		}
		if best == nil || (best.DeletionTimestamp.IsZero() == wl.DeletionTimestamp.IsZero() && best.CreationTimestamp.Before(&wl.CreationTimestamp)) ||
			(!best.DeletionTimestamp.IsZero() && wl.DeletionTimestamp.IsZero()) {
			best = wl
		}
	}
	return best
}

func ownedBy(o metav1.Object, tj *trainer.TrainJob) bool {
	for _, ref := range o.GetOwnerReferences() {
		if ref.UID == tj.UID {
			return true
		}
	}
	return false
}

// live is the Dispatch of wl's current attempt that is not being deleted.
func live(wl *kueue.Workload, ds []v1alpha1.Dispatch) *v1alpha1.Dispatch {
	attempt, err := strconv.Atoi(wl.Annotations[v1alpha1.AnnotationAttempt])
	var best *v1alpha1.Dispatch
	for i := range ds {
		d := &ds[i]
		if !d.DeletionTimestamp.IsZero() || d.Spec.Workload.UID != wl.UID {
			continue
		}
		if err == nil && d.Spec.Attempt == int32(attempt) {
			return d
		}
		if err != nil && (best == nil || d.Spec.Attempt > best.Spec.Attempt) {
			best = d
		}
	}
	return best
}

// tail keeps the last n bytes of s, from a rune boundary.
func tail(s string, n int) string {
	s = s[len(s)-n:]
	for i := 0; i < len(s) && i < 4; i++ {
		if s[i]&0xC0 != 0x80 {
			return s[i:]
		}
	}
	return s
}

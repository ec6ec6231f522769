package tenantview

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// Summarizer writes the PlacementSummary of each TrainJob's live Dispatch
// onto the TrainJob (v1alpha1.AnnotationPlacement), and its progress
// history (v1alpha1.AnnotationProgressHistory), so its owner can see where
// and how it runs without reading Dispatches. The history's copy is
// refreshed at most every historyCopyStep of report time while the job
// runs, so it adds few writes to the summary's.
type Summarizer struct {
	// Client reads Dispatches and Workloads (cached) and patches TrainJobs.
	Client client.Client
	Clock  clock.PassiveClock
}

// summaryDelay holds back the summary of a Dispatch younger than this that
// has not ended. Its first phases (Pending, Submitted, often Running) come
// within a second or two; each summary is a TrainJob update, which wakes
// the hub's Kueue TrainJob reconciler (hub/kueuejob), so one write of where
// the job got to replaces two or three.
const summaryDelay = 2 * time.Second

// agentAnswerDelay holds back the summary of a Dispatch its agent has not
// taken up yet (Pending, no remote job): the Workload's Dispatched event
// already names the target, and on a busy hub the agent's answer comes
// later than summaryDelay, which made the summary one more TrainJob
// update a job. One the agent leaves that long is summarized: the owner
// then sees where it waits.
const agentAnswerDelay = 30 * time.Second

// SetupWithManager registers the summarizer; it wakes on Dispatches, whose
// informer the dispatcher keeps anyway.
func (s *Summarizer) SetupWithManager(mgr ctrl.Manager) error {
	if s.Clock == nil {
		s.Clock = clock.RealClock{}
	}
	return ctrl.NewControllerManagedBy(mgr).Named("trainyard-placement-summary").For(&v1alpha1.Dispatch{}).Complete(s)
}

// Reconcile summarizes one Dispatch onto its TrainJob when it is the live one.
func (s *Summarizer) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var d v1alpha1.Dispatch
	if err := s.Client.Get(ctx, req.NamespacedName, &d); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	var wl kueue.Workload
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: d.Spec.Workload.Namespace, Name: d.Spec.Workload.Name}, &wl); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if wl.UID != d.Spec.Workload.UID || strconv.Itoa(int(d.Spec.Attempt)) != wl.Annotations[v1alpha1.AnnotationAttempt] {
		return ctrl.Result{}, nil // an old attempt's Dispatch: the live one speaks
	}
	owner := metav1.GetControllerOf(&wl)
	if owner == nil || owner.Kind != trainer.TrainJobKind {
		return ctrl.Result{}, nil
	}
	delay := summaryDelay
	if (d.Status.Phase == "" || d.Status.Phase == v1alpha1.DispatchPending) && d.Status.Remote == nil {
		delay = agentAnswerDelay
	}
	if age := s.Clock.Since(d.CreationTimestamp.Time); age < delay && !d.Status.Phase.IsFinal() {
		return ctrl.Result{RequeueAfter: delay - age}, nil
	}
	sum := Summarize(&d)
	raw, err := json.Marshal(sum)
	if err != nil {
		return ctrl.Result{}, err
	}
	var tj trainer.TrainJob
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: wl.Namespace, Name: owner.Name}, &tj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	history, err := historyAnnotation(&d)
	if err != nil {
		return ctrl.Result{}, err
	}
	if tj.UID != owner.UID {
		return ctrl.Result{}, nil
	}
	copied := tj.Annotations[v1alpha1.AnnotationProgressHistory]
	if have := tj.Annotations[v1alpha1.AnnotationPlacement]; have == string(raw) || onlyStarted(have, sum) {
		switch wait := historyCopyDue(copied, d.Status.ProgressHistory, s.Clock.Now()); {
		case copied == ptr.Deref(history, ""):
			return ctrl.Result{}, nil
		case wait > 0 && !d.Status.Phase.IsFinal():
			return ctrl.Result{RequeueAfter: wait}, nil
		}
	}
	// A merge patch of these two annotations: nothing else of the
	// TrainJob is the summarizer's. A null removes an older attempt's
	// history.
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]*string{v1alpha1.AnnotationPlacement: ptr.To(string(raw)), v1alpha1.AnnotationProgressHistory: history}}})
	if err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, client.IgnoreNotFound(s.Client.Patch(ctx, &tj, client.RawPatch("application/merge-patch+json", patch)))
}

// onlyStarted reports whether the summary have, as the TrainJob carries
// it, differs from now, the live Dispatch's, only in that its job has
// started: the summary
// follows where a job is placed and how its attempt ended, and a start is
// the TrainJob's Running condition, which the hub writes anyway (the CLI
// reads it there). Following the start too would be one more TrainJob
// update a job, each of which also costs a dry-run Workload create by
// Kueue's webhook and a pass of the hub's Kueue TrainJob reconciler.
func onlyStarted(have string, now v1alpha1.PlacementSummary) bool {
	if have == "" || now.Phase != v1alpha1.DispatchRunning {
		return false
	}
	var old v1alpha1.PlacementSummary
	if err := json.Unmarshal([]byte(have), &old); err != nil {
		return false
	}
	if old.Phase != v1alpha1.DispatchPending && old.Phase != v1alpha1.DispatchSubmitted {
		return false
	}
	now.Phase, now.Reason, now.Started = old.Phase, old.Reason, old.Started
	return equality.Semantic.DeepEqual(now, old)
}

// historyCopyStep paces the TrainJob's copy of a running job's history:
// new points reach it once they are this much newer than its last one (or
// with the next placement change, or when the attempt ends). The agent
// adds a point every 30 s at most; copying each would be a TrainJob write
// per job every 30 s (333 a second at 10,000 running jobs) on top of the
// progress report's own. At 5 min it is at most 33 a second.
const historyCopyStep = 5 * time.Minute

// historyCopyDue is how long the copy of h may wait: 0 once h's latest
// point, or now, is historyCopyStep past the copy's latest point (or
// either has none, or the copy cannot be read), else until now would be.
// Reading now too lets a job that stopped reporting get its last points
// copied within a step.
func historyCopyDue(copied string, h *v1alpha1.ProgressHistory, now time.Time) time.Duration {
	if h == nil || len(h.Points) == 0 || copied == "" {
		return 0
	}
	var old v1alpha1.ProgressHistory
	if err := json.Unmarshal([]byte(copied), &old); err != nil || len(old.Points) == 0 {
		return 0
	}
	last := old.Points[len(old.Points)-1].Time.Time
	if h.Points[len(h.Points)-1].Time.Sub(last) >= historyCopyStep {
		return 0
	}
	return max(historyCopyStep-now.Sub(last), 0)
}

// historyAnnotation is d's progress history as the TrainJob carries it
// (AnnotationProgressHistory), bounded again so the hub never copies more
// than the bound, or nil when d has none.
func historyAnnotation(d *v1alpha1.Dispatch) (*string, error) {
	h := d.Status.ProgressHistory.DeepCopy()
	if h == nil || len(h.Points) == 0 {
		return nil, nil
	}
	h.Bound()
	raw, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	return ptr.To(string(raw)), nil
}

// Summarize is the tenant's view of d: no runtime snapshot, command, env
// or agent namespace.
func Summarize(d *v1alpha1.Dispatch) v1alpha1.PlacementSummary {
	out := v1alpha1.PlacementSummary{
		Target: d.Spec.TargetName, Attempt: d.Spec.Attempt, Phase: d.Status.Phase, Reason: d.Status.Reason,
		Started: d.Status.StartTime, Ended: d.Status.CompletionTime, Exit: d.Status.ExitCode,
	}
	if out.Phase == "" {
		out.Phase = v1alpha1.DispatchPending
	}
	out.Remote = d.Status.Remote.String()
	for _, ps := range d.Spec.PodSets {
		sum := v1alpha1.PodSetSummary{Name: ps.Name, Count: ps.Count}
		if t := ps.Topology; t != nil && !t.Advisory {
			for i, dom := range t.Domains {
				if i == v1alpha1.MaxSummaryDomains {
					sum.MoreDomains = len(t.Domains) - i
					break
				}
				sum.Domains = append(sum.Domains, fmt.Sprintf("%s=%d", strings.Join(dom.Values, "/"), dom.Count))
			}
		}
		out.PodSets = append(out.PodSets, sum)
	}
	return out
}

package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/placement"
	"github.com/trainyard-dev/trainyard/hub/snapshot"
	"github.com/trainyard-dev/trainyard/internal/metrics"
	"github.com/trainyard-dev/trainyard/internal/text"
)

// MaxRefusals bounds how many targets may refuse one job after placement
// before it is rejected: each refusal re-places the job, and a fleet of
// targets that all accept at placement and refuse at the agent must not
// bounce a job forever.
const MaxRefusals = 8

// EventRefused is sent when a target's agent refuses a job placement chose.
const EventRefused = "TargetRefused"

// ineligibleTargets asks each target whether it could ever run the job, as
// the hub would write it for that target: a target that refused this job
// before, at the same spec, is ineligible with its reason.
func (r *Reconciler) ineligibleTargets(ctx context.Context, wl *kueue.Workload, tj *trainer.TrainJob,
	rt *v1alpha1.RuntimeSnapshot, req placement.Request) (map[string]string, error) {
	var targets v1alpha1.TargetList
	if err := r.client.List(ctx, &targets); err != nil {
		return nil, err
	}
	tjSnap, err := snapshot.TrainJob(tj, rt)
	if err != nil {
		return nil, err
	}
	refused := refusalsOf(wl)
	out := map[string]string{}
	for i := range targets.Items {
		t := &targets.Items[i]
		if f, ok := refused[t.Name]; ok && f.Generation == t.Generation {
			out[t.Name] = "refused this job before: " + f.Reason
			continue
		}
		draft := buildDispatch(t, wl, tjSnap, rt, req, placement.Decision{Target: t.Name}, currentAttempt(wl)+1)
		if why := r.eligibility.Check(t, draft); why != "" {
			out[t.Name] = why
		}
	}
	return out, nil
}

// refused handles a target's refusal of the live Dispatch: the target is
// recorded as ineligible for this job and the Dispatch deleted, so the next
// pass places the job again, elsewhere; the quota stays reserved meanwhile.
// Past MaxRefusals the job is rejected.
func (r *Reconciler) refused(ctx context.Context, s *state) error {
	d := s.live
	refusals := refusalsOf(s.wl)
	var generation int64
	var t v1alpha1.Target
	if err := r.client.Get(ctx, client.ObjectKey{Name: d.Spec.TargetName}, &t); err == nil {
		generation = t.Generation
	} else if client.IgnoreNotFound(err) != nil {
		return err
	}
	refusals[d.Spec.TargetName] = v1alpha1.Refusal{Generation: generation, Reason: d.Status.Message}
	msg := fmt.Sprintf("target %s (attempt %d) refused the job: %s", d.Spec.TargetName, d.Spec.Attempt, d.Status.Message)
	if len(refusals) >= MaxRefusals {
		return r.reject(ctx, s, d.Spec.TargetName, fmt.Sprintf("%d targets refused the job: %s", len(refusals), refusalWords(refusals)))
	}
	if err := r.recordRefusals(ctx, s.wl, refusals); err != nil {
		return err
	}
	if err := r.setCheck(ctx, s, kueue.CheckStatePending, msg+"; placing it again"); err != nil {
		return err
	}
	if err := letGo(ctx, r.client, d); err != nil {
		return err
	}
	metrics.Dispatched(d.Spec.TargetName, metrics.ResultRefused)
	r.recorder.Event(s.wl, corev1.EventTypeWarning, EventRefused, msg)
	return nil
}

// refusalsOf reads the Workload's record of refusals; a record that does
// not parse counts as none (it is only a hint to placement).
func refusalsOf(wl *kueue.Workload) map[string]v1alpha1.Refusal {
	out := map[string]v1alpha1.Refusal{}
	if raw := wl.Annotations[v1alpha1.AnnotationRefusedBy]; raw != "" {
		_ = json.Unmarshal([]byte(raw), &out)
	}
	return out
}

func (r *Reconciler) recordRefusals(ctx context.Context, wl *kueue.Workload, refusals map[string]v1alpha1.Refusal) error {
	for name, f := range refusals {
		f.Reason = text.Truncate(f.Reason, 512)
		refusals[name] = f
	}
	raw, err := json.Marshal(refusals)
	if err != nil {
		return err
	}
	patch := client.MergeFrom(wl.DeepCopy())
	if wl.Annotations == nil {
		wl.Annotations = map[string]string{}
	}
	wl.Annotations[v1alpha1.AnnotationRefusedBy] = string(raw)
	return r.client.Patch(ctx, wl, patch)
}

func refusalWords(refusals map[string]v1alpha1.Refusal) string {
	names := make([]string, 0, len(refusals))
	for n := range refusals {
		names = append(names, n)
	}
	sort.Strings(names)
	words := make([]string, len(names))
	for i, n := range names {
		words[i] = n + ": " + refusals[n].Reason
	}
	return strings.Join(words, "; ")
}

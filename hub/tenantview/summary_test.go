package tenantview

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
)

func TestSummaryOnTheTrainJob(t *testing.T) {
	objs := world()
	live := objs[3].(*v1alpha1.Dispatch)
	live.Status.Phase = v1alpha1.DispatchRunning
	live.Status.Remote = &v1alpha1.RemoteRef{Kind: "JobSet", Namespace: "spoke-ns", Name: "llama-x"}
	live.Status.ExitCode = ptr.To[int32](0)
	live.Spec.PodSets = []v1alpha1.PodSetPlacement{{Name: "node", Count: 3, Topology: &v1alpha1.TopologyAssignment{
		Levels:  []string{"rack", "hostname"},
		Domains: []v1alpha1.TopologyDomainAssignment{{Values: []string{"r1", "n1"}, Count: 2}, {Values: []string{"r1", "n2"}, Count: 1}},
	}}}
	c := fake.NewClientBuilder().WithScheme(kube.Scheme()).WithObjects(objs...).Build()
	s := &Summarizer{Client: c, Clock: clocktesting.NewFakePassiveClock(t0)}
	for _, name := range []string{"llama-1", "llama-2"} {
		if _, err := s.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "agents-1", Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	got := summaryOf(t, c)
	want := v1alpha1.PlacementSummary{Target: "spoke-1", Attempt: 2, Phase: v1alpha1.DispatchRunning, Remote: "JobSet spoke-ns/llama-x",
		Exit: ptr.To[int32](0), PodSets: []v1alpha1.PodSetSummary{{Name: "node", Count: 3, Domains: []string{"r1/n1=2", "r1/n2=1"}}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
}

// summaryOf reads the summary on the TrainJob llama: its zero value when
// there is none.
func summaryOf(t *testing.T, c client.Client) v1alpha1.PlacementSummary {
	t.Helper()
	var tj trainer.TrainJob
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "team-a", Name: "llama"}, &tj); err != nil {
		t.Fatal(err)
	}
	var got v1alpha1.PlacementSummary
	raw, ok := tj.Annotations[v1alpha1.AnnotationPlacement]
	if !ok {
		return got
	}
	if err := json.Unmarshal([]byte(raw), &got); err != nil {
		t.Fatalf("annotation %q: %v", raw, err)
	}
	return got
}

func TestSummaryBoundsDomains(t *testing.T) {
	d := world()[3].(*v1alpha1.Dispatch)
	ta := &v1alpha1.TopologyAssignment{Levels: []string{"hostname"}}
	for range v1alpha1.MaxSummaryDomains + 5 {
		ta.Domains = append(ta.Domains, v1alpha1.TopologyDomainAssignment{Values: []string{"n"}, Count: 1})
	}
	d.Spec.PodSets = []v1alpha1.PodSetPlacement{{Name: "node", Count: 69, Topology: ta}}
	ps := Summarize(d).PodSets[0]
	if len(ps.Domains) != v1alpha1.MaxSummaryDomains || ps.MoreDomains != 5 {
		t.Errorf("domains %d, more %d; want %d and 5", len(ps.Domains), ps.MoreDomains, v1alpha1.MaxSummaryDomains)
	}
}

// TestSummaryLeavesOutAdvisoryDomains: the nodes the hub booked for a job
// that asked for no topology are not where it runs (the remote scheduler
// picks), so the summary names none.
func TestSummaryLeavesOutAdvisoryDomains(t *testing.T) {
	d := world()[3].(*v1alpha1.Dispatch)
	d.Spec.PodSets = []v1alpha1.PodSetPlacement{{Name: "node", Count: 1, Topology: &v1alpha1.TopologyAssignment{
		Levels: []string{"hostname"}, Advisory: true, Domains: []v1alpha1.TopologyDomainAssignment{{Values: []string{"n1"}, Count: 1}}}}}
	if diff := cmp.Diff([]v1alpha1.PodSetSummary{{Name: "node", Count: 1}}, Summarize(d).PodSets); diff != "" {
		t.Errorf("pod sets (-want +got):\n%s", diff)
	}
}

// TestSummaryWaitsForTheFirstPhases: a Dispatch younger than summaryDelay
// that has not ended gets no summary yet (its next phases follow within
// moments, and each summary is a TrainJob update); one its agent has not
// taken up waits agentAnswerDelay; one that ended, or is older, gets it
// at once.
func TestSummaryWaitsForTheFirstPhases(t *testing.T) {
	cases := map[string]struct {
		age       time.Duration
		phase     v1alpha1.DispatchPhase
		wantPhase v1alpha1.DispatchPhase // "" for no summary yet
		wantAfter time.Duration
	}{
		"young and pending": {age: 500 * time.Millisecond, phase: v1alpha1.DispatchPending, wantAfter: agentAnswerDelay - 500*time.Millisecond},
		"pending past summaryDelay, not taken up by its agent": {age: summaryDelay, phase: v1alpha1.DispatchPending, wantAfter: agentAnswerDelay - summaryDelay},
		"pending, left by its agent":                           {age: agentAnswerDelay, phase: v1alpha1.DispatchPending, wantPhase: v1alpha1.DispatchPending},
		"young and submitted":                                  {age: time.Second, phase: v1alpha1.DispatchSubmitted, wantAfter: summaryDelay - time.Second},
		"young and running":                                    {age: time.Second, phase: v1alpha1.DispatchRunning, wantAfter: summaryDelay - time.Second},
		"young and succeeded":                                  {age: time.Second, phase: v1alpha1.DispatchSucceeded, wantPhase: v1alpha1.DispatchSucceeded},
		"old and running":                                      {age: summaryDelay, phase: v1alpha1.DispatchRunning, wantPhase: v1alpha1.DispatchRunning},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			objs := world()
			live := objs[3].(*v1alpha1.Dispatch)
			live.CreationTimestamp = metav1.NewTime(t0)
			live.Status.Phase = tc.phase
			c := fake.NewClientBuilder().WithScheme(kube.Scheme()).WithObjects(objs...).Build()
			s := &Summarizer{Client: c, Clock: clocktesting.NewFakePassiveClock(t0.Add(tc.age))}
			res, err := s.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(live)})
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter != tc.wantAfter {
				t.Errorf("requeue after %v, want %v", res.RequeueAfter, tc.wantAfter)
			}
			got := summaryOf(t, c)
			if got.Phase != tc.wantPhase {
				t.Errorf("summary phase %q, want %q", got.Phase, tc.wantPhase)
			}
		})
	}
}

// TestSummaryFollowsPlacementNotStart: the summary is written again when
// the placement changes (the remote reference becomes known) or the
// attempt ends, not when the job merely starts: that is the TrainJob's
// Running condition, and each summary is a TrainJob update.
func TestSummaryFollowsPlacementNotStart(t *testing.T) {
	remote := &v1alpha1.RemoteRef{Kind: "JobSet", Namespace: "spoke-ns", Name: "llama-x"}
	cases := map[string]struct {
		had       *v1alpha1.RemoteRef    // the remote in the TrainJob's Submitted summary
		now       v1alpha1.DispatchPhase // the live Dispatch's phase
		wantPhase v1alpha1.DispatchPhase // the summary's phase after the pass
	}{
		"started, where it was":         {had: remote, now: v1alpha1.DispatchRunning, wantPhase: v1alpha1.DispatchSubmitted},
		"started, its remote now known": {now: v1alpha1.DispatchRunning, wantPhase: v1alpha1.DispatchRunning},
		"ended":                         {had: remote, now: v1alpha1.DispatchSucceeded, wantPhase: v1alpha1.DispatchSucceeded},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			objs := world()
			live := objs[3].(*v1alpha1.Dispatch)
			live.CreationTimestamp = metav1.NewTime(t0)
			live.Status.Phase, live.Status.Remote = v1alpha1.DispatchSubmitted, tc.had
			before, err := json.Marshal(Summarize(live))
			if err != nil {
				t.Fatal(err)
			}
			objs[0].(*trainer.TrainJob).Annotations = map[string]string{v1alpha1.AnnotationPlacement: string(before)}
			live.Status.Phase, live.Status.Remote = tc.now, remote
			live.Status.StartTime = &metav1.Time{Time: t0.Add(time.Minute)}
			c := fake.NewClientBuilder().WithScheme(kube.Scheme()).WithObjects(objs...).Build()
			s := &Summarizer{Client: c, Clock: clocktesting.NewFakePassiveClock(t0.Add(time.Hour))}
			if _, err := s.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(live)}); err != nil {
				t.Fatal(err)
			}
			got := summaryOf(t, c)
			if got.Phase != tc.wantPhase || got.Remote != remote.String() {
				t.Errorf("summary phase %q, remote %q; want %q, %q", got.Phase, got.Remote, tc.wantPhase, remote.String())
			}
		})
	}
}

// TestProgressHistoryOnTheTrainJob: the live Dispatch's history is copied
// onto its TrainJob, an older attempt's never; a live Dispatch without one
// removes what an earlier attempt left; a history over the bound is
// thinned to it.
func TestProgressHistoryOnTheTrainJob(t *testing.T) {
	objs := world()
	old, live := objs[2].(*v1alpha1.Dispatch), objs[3].(*v1alpha1.Dispatch)
	point := func(i int) v1alpha1.ProgressPoint {
		return v1alpha1.ProgressPoint{Time: metav1.NewTime(t0.Add(time.Duration(i) * time.Minute)), ProgressPercentage: ptr.To(int32(i % 100)), Values: []string{"0.5"}}
	}
	old.Status.ProgressHistory = &v1alpha1.ProgressHistory{StepSeconds: 30, Metrics: []string{"acc"}, Points: []v1alpha1.ProgressPoint{point(0)}}
	oversized := &v1alpha1.ProgressHistory{StepSeconds: 30, Metrics: []string{"loss"}}
	for i := range v1alpha1.MaxProgressPoints + 30 {
		oversized.Points = append(oversized.Points, point(i))
	}
	live.Status.ProgressHistory = oversized
	c := fake.NewClientBuilder().WithScheme(kube.Scheme()).WithObjects(objs...).WithStatusSubresource(&v1alpha1.Dispatch{}).Build()
	s := &Summarizer{Client: c, Clock: clocktesting.NewFakePassiveClock(t0.Add(time.Hour))}
	ctx := context.Background()
	reconcile := func() *v1alpha1.ProgressHistory {
		t.Helper()
		for _, name := range []string{"llama-1", "llama-2"} {
			if _, err := s.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "agents-1", Name: name}}); err != nil {
				t.Fatal(err)
			}
		}
		var tj trainer.TrainJob
		if err := c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "llama"}, &tj); err != nil {
			t.Fatal(err)
		}
		raw, ok := tj.Annotations[v1alpha1.AnnotationProgressHistory]
		if !ok {
			return nil
		}
		var h v1alpha1.ProgressHistory
		if err := json.Unmarshal([]byte(raw), &h); err != nil {
			t.Fatalf("annotation %q: %v", raw, err)
		}
		return &h
	}

	got := reconcile()
	if got == nil || len(got.Points) > v1alpha1.MaxProgressPoints || got.Metrics[0] != "loss" {
		t.Fatalf("history on the TrainJob: %+v, want the live attempt's within the bound", got)
	}
	if first, last := got.Points[0], got.Points[len(got.Points)-1]; !first.Time.Equal(&oversized.Points[0].Time) ||
		!last.Time.Equal(&oversized.Points[len(oversized.Points)-1].Time) {
		t.Errorf("history spans %s..%s, want the live attempt's whole run", first.Time, last.Time)
	}

	live.Status.ProgressHistory = nil
	if err := c.Status().Update(ctx, live); err != nil {
		t.Fatal(err)
	}
	if got := reconcile(); got != nil {
		t.Errorf("a live attempt without history leaves %+v on the TrainJob", got)
	}
}

// TestHistoryCopyIsPaced: while a job runs, new points reach the TrainJob
// once they are historyCopyStep newer than its copy's last, or once that
// much time passed, never with each point; an ended attempt is copied at
// once.
func TestHistoryCopyIsPaced(t *testing.T) {
	at := func(minutes float64) v1alpha1.ProgressPoint {
		return v1alpha1.ProgressPoint{Time: metav1.NewTime(t0.Add(time.Duration(minutes * float64(time.Minute))))}
	}
	history := func(points ...v1alpha1.ProgressPoint) *v1alpha1.ProgressHistory {
		return &v1alpha1.ProgressHistory{StepSeconds: 30, Points: points}
	}
	copied := func(points ...v1alpha1.ProgressPoint) string {
		raw, err := json.Marshal(history(points...))
		if err != nil {
			t.Fatal(err)
		}
		return string(raw)
	}
	cases := map[string]struct {
		copied string
		h      *v1alpha1.ProgressHistory
		now    float64
		want   time.Duration
	}{
		"nothing copied yet":                 {h: history(at(0)), now: 0, want: 0},
		"a point 30 s newer waits":           {copied: copied(at(0)), h: history(at(0), at(0.5)), now: 0.5, want: 270 * time.Second},
		"points a step newer are copied":     {copied: copied(at(0)), h: history(at(0), at(5)), now: 5, want: 0},
		"a step after the copy, copied":      {copied: copied(at(0)), h: history(at(0), at(1)), now: 5, want: 0},
		"an unreadable copy is replaced":     {copied: "{", h: history(at(0)), now: 0, want: 0},
		"a history gone is copied (removed)": {copied: copied(at(0)), now: 0, want: 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			now := t0.Add(time.Duration(tc.now * float64(time.Minute)))
			if got := historyCopyDue(tc.copied, tc.h, now); got != tc.want {
				t.Errorf("historyCopyDue = %s, want %s", got, tc.want)
			}
		})
	}
}

package hubview

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueconstants "sigs.k8s.io/kueue/pkg/controller/constants"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/admissioncheck"
	"github.com/trainyard-dev/trainyard/hub/snapshot"
)

// maxEvents bounds the events describe shows, newest kept.
const maxEvents = 20

// Description is everything `trainyard describe` shows about one TrainJob;
// -o yaml|json prints it as is.
type Description struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Queue     string `json:"queue,omitempty"`
	// RuntimeRef is the TrainJob's runtime as Kind/name, as the user wrote
	// it; RuntimeSource the runtime the hub pinned it from, and
	// PinnedRuntime the pinned copy the hub runs it with.
	RuntimeRef    string             `json:"runtimeRef"`
	RuntimeSource string             `json:"runtimeSource,omitempty"`
	PinnedRuntime string             `json:"pinnedRuntime,omitempty"`
	Created       metav1.Time        `json:"created"`
	Phase         string             `json:"phase"`
	Conditions    []metav1.Condition `json:"conditions,omitempty"`
	Workload      *WorkloadInfo      `json:"workload,omitempty"`
	// Progress is the latest report of the job's processes: the
	// TrainJob's status.trainerStatus, which the hub writes.
	Progress *trainer.TrainerStatus `json:"trainerStatus,omitempty"`
	// ProgressHistory is the live attempt's bounded record of reports:
	// the live Dispatch's, or the hub's copy on the TrainJob for a user
	// who may not read Dispatches.
	ProgressHistory *v1alpha1.ProgressHistory `json:"progressHistory,omitempty"`
	// Placement is the live Dispatch.
	Placement *Placement `json:"placement,omitempty"`
	// Summary is the hub's summary of the live Dispatch written on the
	// TrainJob, shown when the user may not read Dispatches (only
	// administrators may).
	Summary *v1alpha1.PlacementSummary `json:"placementSummary,omitempty"`
	// DispatchesHidden is true when the user may not read Dispatches.
	DispatchesHidden bool `json:"dispatchesHidden,omitempty"`
	// Attempts are all Dispatches of the Workload still stored.
	Attempts []AttemptInfo `json:"attempts,omitempty"`
	Events   []EventInfo   `json:"events,omitempty"`
}

// WorkloadInfo is the Kueue Workload's admission and checks.
type WorkloadInfo struct {
	Name         string                   `json:"name"`
	ClusterQueue string                   `json:"clusterQueue,omitempty"`
	Conditions   []metav1.Condition       `json:"conditions,omitempty"`
	PodSets      []kueue.PodSetAssignment `json:"podSetAssignments,omitempty"`
	Checks       []CheckInfo              `json:"admissionChecks,omitempty"`
}

// CheckInfo is one admission check of the Workload.
type CheckInfo struct {
	Name  string           `json:"name"`
	State kueue.CheckState `json:"state"`
	// Trainyard marks the checks trainyard's dispatcher serves.
	Trainyard          bool        `json:"trainyard"`
	Message            string      `json:"message,omitempty"`
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitzero"`
}

// Placement is where the live Dispatch runs the job and how it is doing.
type Placement struct {
	Dispatch       string                     `json:"dispatch"`
	Target         string                     `json:"target"`
	Attempt        int32                      `json:"attempt"`
	PodSets        []v1alpha1.PodSetPlacement `json:"podSets"`
	Runtime        RuntimeInfo                `json:"runtime"`
	Phase          string                     `json:"phase"`
	Reason         string                     `json:"reason,omitempty"`
	Message        string                     `json:"message,omitempty"`
	Remote         *v1alpha1.RemoteRef        `json:"remote,omitempty"`
	ExitCode       *int32                     `json:"exitCode,omitempty"`
	StartTime      *metav1.Time               `json:"startTime,omitempty"`
	CompletionTime *metav1.Time               `json:"completionTime,omitempty"`
}

// RuntimeInfo is the Dispatch's runtime snapshot without its spec.
type RuntimeInfo struct {
	Kind v1alpha1.RuntimeKind `json:"kind"`
	Name string               `json:"name"`
	Hash string               `json:"hash"`
}

// AttemptInfo is one stored Dispatch of the Workload.
type AttemptInfo struct {
	Dispatch string `json:"dispatch"`
	Target   string `json:"target"`
	Attempt  int32  `json:"attempt"`
	Phase    string `json:"phase,omitempty"`
	Live     bool   `json:"live"`
	Deleting bool   `json:"deleting,omitempty"`
}

// EventInfo is one event of the TrainJob or its Workload.
type EventInfo struct {
	Object  string      `json:"object"`
	Type    string      `json:"type"`
	Reason  string      `json:"reason"`
	From    string      `json:"from,omitempty"`
	Count   int32       `json:"count,omitempty"`
	Last    metav1.Time `json:"last"`
	Message string      `json:"message"`
}

// DescribeJob is what `trainyard describe` shows of TrainJob ns/name: it
// reads the TrainJob, its Workload, their Dispatches, admission checks and
// events. Warnings say what could not be read.
func DescribeJob(ctx context.Context, c client.Reader, ns, name string) (*Description, []string, error) {
	s, hidden, warnings, err := readJob(ctx, c, ns, name)
	if err != nil {
		return nil, nil, err
	}
	tj := s.TrainJob
	d := s.Describe(trainyardChecks(ctx, c, s.Workload))
	if hidden {
		d.DispatchesHidden, d.Summary = true, withStart(placementSummary(tj), tj)
		if d.Summary != nil {
			d.Phase = string(d.Summary.Phase)
		}
	}
	objs := map[types.UID]string{tj.UID: "TrainJob/" + tj.Name}
	if s.Workload != nil {
		objs[s.Workload.UID] = "Workload/" + s.Workload.Name
	}
	if d.Events, err = eventsOf(ctx, c, ns, objs); err != nil {
		warnings = append(warnings, fmt.Sprint("cannot list events: ", err))
	}
	return d, warnings, nil
}

// readJob reads one TrainJob of namespace ns with its Workload and only
// that Workload's Dispatches (by its UID). hidden is true when the user may
// not read Dispatches: tenants never may, they live in the targets' agent
// namespaces.
func readJob(ctx context.Context, c client.Reader, ns, name string) (s Job, hidden bool, warnings []string, err error) {
	var tj trainer.TrainJob
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &tj); err != nil {
		return Job{}, false, nil, lacksRights(notFoundIn(Explain(err), ns), "read trainjob "+name, ns, TenantViewRole)
	}
	lists := &hubLists{}
	if err := lists.listWorkloads(ctx, c, ns); err != nil {
		return Job{}, false, nil, err
	}
	wl := NewIndex(lists.workloads, nil).Job(&tj).Workload
	if wl != nil {
		// listDispatches warns only when the list is forbidden; describe
		// says so in its placement instead.
		before := len(lists.warnings)
		if err := lists.listDispatches(ctx, c, client.MatchingLabels{v1alpha1.LabelWorkloadUID: string(wl.UID)}); err != nil {
			return Job{}, false, nil, err
		}
		hidden = len(lists.warnings) > before
		lists.warnings = lists.warnings[:before]
	}
	return NewIndex(lists.workloads, lists.dispatches).Job(&tj), hidden, lists.warnings, nil
}

// placementSummary is the hub's summary of the live Dispatch on tj, or nil.
func placementSummary(tj *trainer.TrainJob) *v1alpha1.PlacementSummary {
	raw := tj.Annotations[v1alpha1.AnnotationPlacement]
	if raw == "" {
		return nil
	}
	var sum v1alpha1.PlacementSummary
	if err := json.Unmarshal([]byte(raw), &sum); err != nil {
		return nil
	}
	return &sum
}

// withStart is sum with the start of tj's job, which the hub's summary
// leaves to the TrainJob's Running condition (hub/tenantview writes a
// summary again only for a new placement or an ended attempt): a summary
// still Pending or Submitted while that condition is True is Running
// since the condition's last transition.
func withStart(sum *v1alpha1.PlacementSummary, tj *trainer.TrainJob) *v1alpha1.PlacementSummary {
	if sum == nil || (sum.Phase != v1alpha1.DispatchPending && sum.Phase != v1alpha1.DispatchSubmitted) {
		return sum
	}
	running := apimeta.FindStatusCondition(tj.Status.Conditions, v1alpha1.TrainJobRunning)
	if running == nil || running.Status != metav1.ConditionTrue {
		return sum
	}
	sum.Phase, sum.Reason = v1alpha1.DispatchRunning, ""
	if sum.Started == nil {
		sum.Started = running.LastTransitionTime.DeepCopy()
	}
	return sum
}

// Describe builds the Description of a job, without events; trainyard
// names the admission checks trainyard serves.
func (s Job) Describe(trainyard map[kueue.AdmissionCheckReference]bool) *Description {
	tj := s.TrainJob
	d := &Description{
		Namespace: tj.Namespace, Name: tj.Name, Queue: tj.Labels[kueueconstants.QueueLabel],
		RuntimeRef:    fmt.Sprintf("%s/%s", ptr.Deref(tj.Spec.RuntimeRef.Kind, trainer.ClusterTrainingRuntimeKind), tj.Spec.RuntimeRef.Name),
		RuntimeSource: tj.Annotations[v1alpha1.AnnotationRuntimeSource],
		PinnedRuntime: pinnedRuntime(tj),
		Created:       tj.CreationTimestamp, Phase: s.Phase(), Conditions: tj.Status.Conditions,
		Progress: tj.Status.TrainerStatus, ProgressHistory: ProgressHistoryOf(tj),
	}
	if l := s.Live; l != nil && l.Status.ProgressHistory != nil {
		d.ProgressHistory = l.Status.ProgressHistory
	}
	if wl := s.Workload; wl != nil {
		d.Workload = &WorkloadInfo{Name: wl.Name, Conditions: wl.Status.Conditions}
		if a := wl.Status.Admission; a != nil {
			d.Workload.ClusterQueue, d.Workload.PodSets = string(a.ClusterQueue), a.PodSetAssignments
		}
		for _, c := range wl.Status.AdmissionChecks {
			d.Workload.Checks = append(d.Workload.Checks, CheckInfo{
				Name: string(c.Name), State: c.State, Trainyard: trainyard[c.Name],
				Message: c.Message, LastTransitionTime: c.LastTransitionTime,
			})
		}
	}
	if l := s.Live; l != nil {
		d.Placement = &Placement{
			Dispatch: l.Namespace + "/" + l.Name, Target: l.Spec.TargetName, Attempt: l.Spec.Attempt,
			PodSets: l.Spec.PodSets,
			Runtime: RuntimeInfo{Kind: l.Spec.Runtime.Kind, Name: l.Spec.Runtime.Name, Hash: l.Spec.Runtime.Hash},
			Phase:   s.Phase(), Reason: l.Status.Reason, Message: l.Status.Message, Remote: l.Status.Remote,
			ExitCode: l.Status.ExitCode, StartTime: l.Status.StartTime, CompletionTime: l.Status.CompletionTime,
		}
	}
	for i := range s.Dispatches {
		ds := &s.Dispatches[i]
		d.Attempts = append(d.Attempts, AttemptInfo{
			Dispatch: ds.Namespace + "/" + ds.Name, Target: ds.Spec.TargetName, Attempt: ds.Spec.Attempt,
			Phase: string(ds.Status.Phase), Live: ds == s.Live, Deleting: !ds.DeletionTimestamp.IsZero(),
		})
	}
	return d
}

// trainyardChecks returns which of wl's admission checks name trainyard's
// controller. A check whose AdmissionCheck cannot be read is not marked.
func trainyardChecks(ctx context.Context, c client.Reader, wl *kueue.Workload) map[kueue.AdmissionCheckReference]bool {
	out := map[kueue.AdmissionCheckReference]bool{}
	if wl == nil {
		return out
	}
	for _, s := range wl.Status.AdmissionChecks {
		var ac kueue.AdmissionCheck
		if err := c.Get(ctx, client.ObjectKey{Name: string(s.Name)}, &ac); err == nil {
			out[s.Name] = ac.Spec.ControllerName == admissioncheck.ControllerName
		}
	}
	return out
}

// eventsOf lists the events of the given objects (UID to Kind/name), oldest
// first, keeping the newest maxEvents.
func eventsOf(ctx context.Context, c client.Reader, ns string, objs map[types.UID]string) ([]EventInfo, error) {
	var out []EventInfo
	for uid, obj := range objs {
		var l corev1.EventList
		if err := c.List(ctx, &l, client.InNamespace(ns), client.MatchingFields{"involvedObject.uid": string(uid)}); err != nil {
			return nil, err
		}
		for _, ev := range l.Items {
			out = append(out, eventInfo(obj, &ev))
		}
	}
	slices.SortStableFunc(out, func(a, b EventInfo) int {
		if c := a.Last.Compare(b.Last.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Object+a.Reason+a.Message, b.Object+b.Reason+b.Message)
	})
	return out[max(0, len(out)-maxEvents):], nil
}

// eventInfo reads both core/v1 and events.k8s.io/v1 style events.
func eventInfo(obj string, ev *corev1.Event) EventInfo {
	last := ev.LastTimestamp
	if last.IsZero() && !ev.EventTime.IsZero() {
		last = metav1.Time{Time: ev.EventTime.Time}
	}
	if ev.Series != nil && !ev.Series.LastObservedTime.IsZero() {
		last = metav1.Time{Time: ev.Series.LastObservedTime.Time}
	}
	if last.IsZero() {
		last = ev.CreationTimestamp
	}
	from := ev.Source.Component
	if from == "" {
		from = ev.ReportingController
	}
	count := ev.Count
	if ev.Series != nil {
		count = ev.Series.Count
	}
	return EventInfo{Object: obj, Type: ev.Type, Reason: ev.Reason, From: from, Count: count, Last: last, Message: ev.Message}
}

// notFoundIn names the namespace in a not-found error, which the API
// server's message leaves out.
func notFoundIn(err error, ns string) error {
	if apierrors.IsNotFound(err) && ns != "" {
		return fmt.Errorf("%w in namespace %q", err, ns)
	}
	return err
}

// pinnedRuntime is tj's pinned copy as Kind/name, or "" for a job that is
// not pinned.
func pinnedRuntime(tj *trainer.TrainJob) string {
	ref, err := snapshot.PinnedRef(tj)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%s/%s", ptr.Deref(ref.Kind, ""), ref.Name)
}

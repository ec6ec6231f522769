package hubview

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

var now = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

func ago(d time.Duration) metav1.Time { return metav1.Time{Time: now.Add(-d)} }

func trainJob(name string, conds ...string) *trainer.TrainJob {
	tj := tytesting.MakeTrainJob(name, "team-a").Queue("lq").Obj()
	tj.UID = types.UID("tj-" + name)
	tj.CreationTimestamp = ago(10 * time.Minute)
	for _, c := range conds {
		apimeta.SetStatusCondition(&tj.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue, Reason: c})
	}
	return tj
}

// workloadOf returns tj's Workload with the given attempt annotation ("" for
// none) and True conditions.
func workloadOf(tj *trainer.TrainJob, attempt string, conds ...string) kueue.Workload {
	wl := kueue.Workload{ObjectMeta: metav1.ObjectMeta{
		Name: "trainjob-" + tj.Name, Namespace: tj.Namespace, UID: types.UID("wl-" + tj.Name),
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: trainer.GroupVersion.String(), Kind: trainer.TrainJobKind, Name: tj.Name, UID: tj.UID, Controller: ptr.To(true),
		}},
	}}
	if attempt != "" {
		wl.Annotations = map[string]string{v1alpha1.AnnotationAttempt: attempt}
	}
	for _, c := range conds {
		apimeta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue, Reason: c})
	}
	return wl
}

func dispatchOf(wl kueue.Workload, attempt int32, target string, phase v1alpha1.DispatchPhase) *tytesting.DispatchWrapper {
	return tytesting.MakeDispatch(string(wl.UID)+"-"+target, "trainyard-"+target, target).
		WorkloadUID(wl.UID).Attempt(attempt).Phase(phase)
}

func TestJobSummary(t *testing.T) {
	tj := trainJob("a")
	cases := map[string]struct {
		tj         *trainer.TrainJob
		wls        []kueue.Workload
		dispatches []v1alpha1.Dispatch
		want       JobSummary
	}{
		"no workload yet: Pending": {
			tj:   tj,
			want: JobSummary{Phase: StatePending},
		},
		"quota reserved, no dispatch: Pending": {
			tj:   tj,
			wls:  []kueue.Workload{workloadOf(tj, "", kueue.WorkloadQuotaReserved)},
			want: JobSummary{Workload: "trainjob-a", Phase: StatePending},
		},
		"admitted, no dispatch: Admitted": {
			tj:   tj,
			wls:  []kueue.Workload{workloadOf(tj, "", kueue.WorkloadQuotaReserved, kueue.WorkloadAdmitted)},
			want: JobSummary{Workload: "trainjob-a", Phase: StateAdmitted},
		},
		"workload finished, no dispatch: Finished": {
			tj:   tj,
			wls:  []kueue.Workload{workloadOf(tj, "1", kueue.WorkloadFinished)},
			want: JobSummary{Workload: "trainjob-a", Phase: StateFinished},
		},
		"train job failed without a workload: Finished": {
			tj:   trainJob("a", trainer.TrainJobFailed),
			want: JobSummary{Phase: StateFinished},
		},
		"dispatch of the current attempt": {
			tj:  tj,
			wls: []kueue.Workload{workloadOf(tj, "2", kueue.WorkloadAdmitted)},
			dispatches: []v1alpha1.Dispatch{
				*dispatchOf(workloadOf(tj, ""), 2, "spoke-2", v1alpha1.DispatchRunning).
					Remote(&v1alpha1.RemoteRef{Kind: "JobSet", Namespace: "trainyard-jobs", Name: "ty-a-2"}).Obj(),
				*dispatchOf(workloadOf(tj, ""), 1, "spoke-1", v1alpha1.DispatchFailed).Obj(),
			},
			want: JobSummary{Workload: "trainjob-a", Target: "spoke-2", Attempt: 2, Phase: "Running",
				Remote: &v1alpha1.RemoteRef{Kind: "JobSet", Namespace: "trainyard-jobs", Name: "ty-a-2"}},
		},
		"a dispatch without a phase is Pending": {
			tj:         tj,
			wls:        []kueue.Workload{workloadOf(tj, "1", kueue.WorkloadQuotaReserved)},
			dispatches: []v1alpha1.Dispatch{*dispatchOf(workloadOf(tj, ""), 1, "spoke-1", "").Obj()},
			want:       JobSummary{Workload: "trainjob-a", Target: "spoke-1", Attempt: 1, Phase: "Pending"},
		},
		"a dispatch being deleted is not live": {
			tj:  tj,
			wls: []kueue.Workload{workloadOf(tj, "1", kueue.WorkloadQuotaReserved)},
			dispatches: []v1alpha1.Dispatch{*dispatchOf(workloadOf(tj, ""), 1, "spoke-1", v1alpha1.DispatchRunning).
				Finalizers(v1alpha1.RemoteCleanupFinalizer).DeletionTimestamp(now).Obj()},
			want: JobSummary{Workload: "trainjob-a", Phase: StatePending},
		},
		"an older attempt than the workload's is not live": {
			tj:         tj,
			wls:        []kueue.Workload{workloadOf(tj, "2", kueue.WorkloadQuotaReserved)},
			dispatches: []v1alpha1.Dispatch{*dispatchOf(workloadOf(tj, ""), 1, "spoke-1", v1alpha1.DispatchFailed).Obj()},
			want:       JobSummary{Workload: "trainjob-a", Phase: StatePending},
		},
		"without the attempt annotation the latest attempt is live": {
			tj:  tj,
			wls: []kueue.Workload{workloadOf(tj, "", kueue.WorkloadFinished)},
			dispatches: []v1alpha1.Dispatch{
				*dispatchOf(workloadOf(tj, ""), 1, "spoke-1", v1alpha1.DispatchFailed).Obj(),
				*dispatchOf(workloadOf(tj, ""), 3, "hpc", v1alpha1.DispatchSucceeded).Obj(),
			},
			want: JobSummary{Workload: "trainjob-a", Target: "hpc", Attempt: 3, Phase: "Succeeded"},
		},
		"another job's workload and dispatch are not this job's": {
			tj:         tj,
			wls:        []kueue.Workload{workloadOf(trainJob("b"), "1", kueue.WorkloadAdmitted)},
			dispatches: []v1alpha1.Dispatch{*dispatchOf(workloadOf(trainJob("b"), ""), 1, "spoke-1", v1alpha1.DispatchRunning).Obj()},
			want:       JobSummary{Phase: StatePending},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := NewIndex(tc.wls, tc.dispatches).Job(tc.tj).Summary()
			want := tc.want
			want.Namespace, want.Name, want.Queue, want.Created = "team-a", "a", "lq", tc.tj.CreationTimestamp
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("summary (-want +got):\n%s", diff)
			}
		})
	}
}

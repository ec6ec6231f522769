package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tyt "github.com/trainyard-dev/trainyard/internal/testing"
)

var tProgress = time.Date(2026, 12, 5, 4, 0, 0, 0, time.UTC)

func report(pct int32, at time.Time) *trainer.TrainerStatus {
	return &trainer.TrainerStatus{ProgressPercentage: ptr.To(pct), EstimatedRemainingSeconds: ptr.To[int32](60),
		Metrics: []trainer.Metric{{Name: "loss", Value: "0.5"}}, LastUpdatedTime: metav1.NewTime(at)}
}

// progressWrittenAt is a TrainJob showing ts, which the hub's progress
// apply last changed at written (zero: another writer's).
func progressWrittenAt(ts *trainer.TrainerStatus, written time.Time) *trainer.TrainJob {
	tj := tyt.MakeTrainJob("train", "team-a").Obj()
	tj.Status.TrainerStatus = ts
	if !written.IsZero() {
		tj.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: ProgressFieldOwner, Operation: metav1.ManagedFieldsOperationApply,
			Subresource: "status", Time: ptr.To(metav1.NewTime(written))}}
	}
	return tj
}

func TestDecideProgress(t *testing.T) {
	created := tProgress.Add(-time.Hour)
	live := func(phase v1alpha1.DispatchPhase, ts *trainer.TrainerStatus) *v1alpha1.Dispatch {
		d := tyt.MakeDispatch("d", "agents", "spoke-1").Attempt(2).Phase(phase).Progress(ts).Obj()
		d.CreationTimestamp = metav1.NewTime(created)
		return d
	}
	now := tProgress
	cases := map[string]struct {
		d          *v1alpha1.Dispatch
		tj         *trainer.TrainJob
		lastWrite  time.Time
		want       progressAction
		wantWaitAt time.Duration
	}{
		"no report, none shown": {
			d: live(v1alpha1.DispatchRunning, nil), tj: progressWrittenAt(nil, time.Time{}), want: progressKeep,
		},
		"first report is written at once": {
			d: live(v1alpha1.DispatchRunning, report(10, now)), tj: progressWrittenAt(nil, time.Time{}), want: progressWrite,
		},
		"report already shown": {
			d:  live(v1alpha1.DispatchRunning, report(10, now)),
			tj: progressWrittenAt(report(10, now), now.Add(-time.Second)), want: progressKeep,
		},
		"new report within the interval by managed fields waits": {
			d:  live(v1alpha1.DispatchRunning, report(20, now)),
			tj: progressWrittenAt(report(10, now), now.Add(-10*time.Second)), want: progressWait, wantWaitAt: 20 * time.Second,
		},
		"new report within the interval by the hub's memory waits": {
			d:  live(v1alpha1.DispatchRunning, report(20, now)),
			tj: progressWrittenAt(report(10, now), now.Add(-time.Hour)), lastWrite: now.Add(-25 * time.Second),
			want: progressWait, wantWaitAt: 5 * time.Second,
		},
		"new report after the interval is written": {
			d:  live(v1alpha1.DispatchRunning, report(20, now)),
			tj: progressWrittenAt(report(10, now), now.Add(-MinProgressInterval)), want: progressWrite,
		},
		"finished work's last report is written at once": {
			d:  live(v1alpha1.DispatchSucceeded, report(100, now)),
			tj: progressWrittenAt(report(90, now), now.Add(-time.Second)), want: progressWrite,
		},
		"a status of an older attempt is not relayed": {
			d: func() *v1alpha1.Dispatch {
				d := live(v1alpha1.DispatchRunning, report(50, now))
				d.Status.ObservedAttempt = 1
				return d
			}(),
			tj: progressWrittenAt(nil, time.Time{}), want: progressKeep,
		},
		"the hub's report of an older attempt is dropped": {
			d:  live(v1alpha1.DispatchRunning, nil),
			tj: progressWrittenAt(report(80, created), created.Add(-time.Minute)), want: progressClear,
		},
		"the hub's report of this attempt stays": {
			d:  live(v1alpha1.DispatchRunning, nil),
			tj: progressWrittenAt(report(80, now), created.Add(time.Minute)), want: progressKeep,
		},
		"another writer's report stays": {
			d: live(v1alpha1.DispatchRunning, nil), tj: progressWrittenAt(report(80, now), time.Time{}), want: progressKeep,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, wait := decideProgress(tc.d, tc.tj, tc.lastWrite, now)
			if got != tc.want || wait != tc.wantWaitAt {
				t.Errorf("decideProgress = %v, %v; want %v, %v", got, wait, tc.want, tc.wantWaitAt)
			}
		})
	}
}

// TestRelayProgressAppliesOnlyTrainerStatus: the hub writes the report as
// trainyard-progress with nothing but status.trainerStatus, holds the next
// one back for MinProgressInterval, and leaves the phase mirror's fields
// and other writers' conditions alone.
func TestRelayProgressAppliesOnlyTrainerStatus(t *testing.T) {
	ctx := context.Background()
	tj := tyt.MakeTrainJob("train", "team-a").Obj()
	tj.UID = "uid-train"
	c, log := statusClient(t, tj)
	clk := clocktesting.NewFakeClock(tProgress)
	r := NewReconciler(c, c, record.NewFakeRecorder(10), clk, Options{})
	s := mirrorState(tj, v1alpha1.DispatchRunning)
	s.live.Status.TrainerStatus, s.live.Status.ObservedAttempt = report(10, tProgress), s.live.Spec.Attempt

	if wait, err := r.mirrorToTrainJob(ctx, s); err != nil || wait != 0 {
		t.Fatalf("mirror = %v, %v; want written now", wait, err)
	}
	var shapes []appliedShape
	for _, a := range *log {
		shapes = append(shapes, shapeOf(a))
	}
	want := []appliedShape{
		{Owner: FieldOwner, Force: true, Keys: []string{"apiVersion", "kind", "metadata", "status"},
			StatusKeys: []string{"conditions", "jobsStatus"}, Conditions: []string{v1alpha1.TrainJobCreated, v1alpha1.TrainJobRunning}, Jobs: []string{"node"}},
		{Owner: ProgressFieldOwner, Force: true, Keys: []string{"apiVersion", "kind", "metadata", "status"}, StatusKeys: []string{"trainerStatus"}},
	}
	if diff := cmp.Diff(want, shapes); diff != "" {
		t.Errorf("applies (-want +got):\n%s", diff)
	}
	got := trainJobOf(t, c, tj)
	if diff := cmp.Diff(report(10, tProgress), got.Status.TrainerStatus); diff != "" {
		t.Errorf("trainerStatus (-want +got):\n%s", diff)
	}

	// A newer report 10 s later waits for the rest of the interval.
	*log = nil
	clk.Step(10 * time.Second)
	s.live.Status.TrainerStatus = report(20, clk.Now())
	if wait, err := r.mirrorToTrainJob(ctx, s); err != nil || wait != MinProgressInterval-10*time.Second {
		t.Fatalf("mirror = %v, %v; want held back 20s", wait, err)
	}
	if len(*log) != 0 {
		t.Errorf("written within the interval: %v", *log)
	}
	clk.Step(20 * time.Second)
	if wait, err := r.mirrorToTrainJob(ctx, s); err != nil || wait != 0 {
		t.Fatalf("mirror = %v, %v; want written", wait, err)
	}
	got = trainJobOf(t, c, tj)
	if ptr.Deref(got.Status.TrainerStatus.ProgressPercentage, 0) != 20 {
		t.Errorf("trainerStatus = %+v, want 20%%", got.Status.TrainerStatus)
	}
	if diff := cmp.Diff([]string{v1alpha1.TrainJobCreated, v1alpha1.TrainJobRunning}, conditionTypes(got.Status.Conditions)); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}
}

func trainJobOf(t *testing.T, c client.Client, tj *trainer.TrainJob) *trainer.TrainJob {
	t.Helper()
	var got trainer.TrainJob
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(tj), &got); err != nil {
		t.Fatal(err)
	}
	return &got
}

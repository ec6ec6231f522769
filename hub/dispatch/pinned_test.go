package dispatch

import (
	"context"
	"strings"
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueuetesting "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/snapshot"
	tyt "github.com/trainyard-dev/trainyard/internal/testing"
)

// pinTrainJob pins the TrainJob "train" among objs as the pinning webhook
// would have at its creation, and adds the pinned copy of a one-node torch
// runtime it then names.
func pinTrainJob(t *testing.T, objs []client.Object) []client.Object {
	t.Helper()
	spec := tyt.TorchRuntimeSpec(1)
	_, hash, err := snapshot.Encode(spec)
	if err != nil {
		t.Fatal(err)
	}
	rt := &trainer.TrainingRuntime{ObjectMeta: metav1.ObjectMeta{
		Name: "torch-distributed-" + strings.TrimPrefix(hash, "sha256:")[:12], Namespace: "team-a",
		Labels:      map[string]string{v1alpha1.LabelPinnedRuntime: "true"},
		Annotations: map[string]string{v1alpha1.AnnotationRuntimeSource: "ClusterTrainingRuntime/torch-distributed", v1alpha1.AnnotationRuntimeHash: hash},
	}, Spec: spec}
	for _, o := range objs {
		if tj, ok := o.(*trainer.TrainJob); ok && tj.Name == "train" {
			tj.Spec.RuntimeRef = trainer.RuntimeRef{Name: rt.Name, APIGroup: ptr.To(trainer.GroupVersion.Group), Kind: ptr.To(trainer.TrainingRuntimeKind)}
			tj.Annotations = map[string]string{v1alpha1.AnnotationRuntimeSource: rt.Annotations[v1alpha1.AnnotationRuntimeSource], v1alpha1.AnnotationRuntimeHash: hash}
		}
	}
	return append(objs, rt)
}

// TestUnpinnedJobIsNeverDispatched: a queued TrainJob whose runtime was
// not pinned at creation (created before the webhook ran, or while it was
// off) is rejected with the reason, its quota released, and no Dispatch
// is written: it would run the live runtime, which the tenant can edit.
// Pinned, the same job is dispatched.
func TestUnpinnedJobIsNeverDispatched(t *testing.T) {
	for name, pinned := range map[string]bool{"unpinned": false, "pinned": true} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			objs := append(hubState{check: kueue.CheckStatePending}.objects(), tyt.MakeClusterTrainingRuntime("torch-distributed").Obj())
			for _, o := range objs {
				if wl, ok := o.(*kueue.Workload); ok { // the pod set Trainer's torch runtime makes
					wl.Spec.PodSets = []kueue.PodSet{*kueuetesting.MakePodSet("node", 1).Obj()}
				}
			}
			if pinned {
				objs = pinTrainJob(t, objs)
			}
			c, _ := statusClient(t, objs...)
			rec := record.NewFakeRecorder(10)
			r := NewReconciler(c, c, rec, clocktesting.NewFakeClock(t0), Options{})
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "team-a", Name: "wl"}}); err != nil {
				t.Fatal(err)
			}
			var wl kueue.Workload
			if err := c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "wl"}, &wl); err != nil {
				t.Fatal(err)
			}
			var dispatches v1alpha1.DispatchList
			if err := c.List(ctx, &dispatches); err != nil {
				t.Fatal(err)
			}
			st := wl.Status.AdmissionChecks[0]
			if pinned {
				if st.State != kueue.CheckStatePending || len(dispatches.Items) != 1 {
					t.Fatalf("pinned job: check %s %q and %d Dispatches, want Pending and dispatched", st.State, st.Message, len(dispatches.Items))
				}
				return
			}
			if len(dispatches.Items) != 0 {
				t.Errorf("an unpinned job was dispatched: %v", dispatches.Items[0].Name)
			}
			if st.State != kueue.CheckStateRejected || !strings.Contains(st.Message, "was not pinned") ||
				!strings.Contains(st.Message, "create it again with the label") {
				t.Errorf("check %s %q, want Rejected saying the job was not pinned and what to do", st.State, st.Message)
			}
			var tj trainer.TrainJob
			if err := c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "train"}, &tj); err != nil {
				t.Fatal(err)
			}
			if failed := apimeta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobFailed); failed == nil ||
				failed.Reason != v1alpha1.ReasonDispatchRejected || failed.Message != "trainyard: "+st.Message {
				t.Errorf("TrainJob Failed = %+v, want DispatchRejected with the check's message", failed)
			}
			close(rec.Events)
			var events []string
			for e := range rec.Events {
				events = append(events, e)
			}
			if len(events) != 1 || !strings.HasPrefix(events[0], "Warning "+EventRejected+" ") || !strings.Contains(events[0], "was not pinned") {
				t.Errorf("events %q, want one Warning %s saying the job was not pinned", events, EventRejected)
			}
		})
	}
}

// TestDispatchLeavesTheCheckToTheAgent: a job just dispatched leaves its
// check as it was (as Kueue made it, waiting for room, an earlier
// message) for the agent's answer to set Ready: no Workload write says
// "dispatched" a second before the answer does. The Workload has had
// attempt 1 (hubState), so this is attempt 2.
func TestDispatchLeavesTheCheckToTheAgent(t *testing.T) {
	cases := map[string]struct {
		before, want string
	}{
		"as Kueue made it":   {before: "", want: ""},
		"waiting for room":   {before: WaitingPrefix + "no target has room", want: WaitingPrefix + "no target has room"},
		"an earlier message": {before: "before", want: "before"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			objs := append(hubState{check: kueue.CheckStatePending}.objects(), tyt.MakeClusterTrainingRuntime("torch-distributed").Obj())
			for _, o := range objs {
				if wl, ok := o.(*kueue.Workload); ok {
					wl.Spec.PodSets = []kueue.PodSet{*kueuetesting.MakePodSet("node", 1).Obj()}
					wl.Status.AdmissionChecks[0].Message = tc.before
				}
			}
			c, _ := statusClient(t, pinTrainJob(t, objs)...)
			r := NewReconciler(c, c, record.NewFakeRecorder(10), clocktesting.NewFakeClock(t0), Options{})
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "team-a", Name: "wl"}}); err != nil {
				t.Fatal(err)
			}
			var dispatches v1alpha1.DispatchList
			if err := c.List(ctx, &dispatches); err != nil {
				t.Fatal(err)
			}
			var wl kueue.Workload
			if err := c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "wl"}, &wl); err != nil {
				t.Fatal(err)
			}
			if st := wl.Status.AdmissionChecks[0]; len(dispatches.Items) != 1 || st.State != kueue.CheckStatePending || st.Message != tc.want {
				t.Errorf("%d Dispatches, check %s %q; want 1, Pending %q", len(dispatches.Items), st.State, st.Message, tc.want)
			}
		})
	}
}

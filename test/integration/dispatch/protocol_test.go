package dispatch

import (
	"context"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueuetesting "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	trainyard "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/controllers"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/hub/admissioncheck"
	"github.com/trainyard-dev/trainyard/hub/dispatch"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// TestDispatchDeletedUnderReadyIsRequeued: deleting the Dispatch of a
// running job requeues the job (its quota is not held by nothing): the
// agent removes the remote work and a new attempt runs.
func TestDispatchDeletedUnderReadyIsRequeued(t *testing.T) {
	g := NewWithT(t)
	ctx, c := context.Background(), env.fleet.Hub.Client
	makeRuntime(t, "torch-dispdel", "10m")
	tj := submit(t, trainJob("dispdel", "torch-dispdel", 1, 2))
	wl, first := waitRunning(t, tj)
	g.Expect(c.Delete(ctx, &first)).To(Succeed())

	_, second := waitRunning(t, tj)
	g.Expect(second.Spec.Attempt).To(BeNumerically(">", first.Spec.Attempt))
	g.Eventually(func(g Gomega) {
		rs := remoteJobSetsOf(t, tj)
		g.Expect(rs).To(HaveLen(1))
		g.Expect(rs[0].js.Name).To(HaveSuffix("-a" + itoa(second.Spec.Attempt)))
		g.Expect(eventMessages(g, wl, dispatch.EventRequeued)).To(ContainElement(
			ContainSubstring("Dispatch of attempt " + itoa(first.Spec.Attempt) + " was deleted")))
	}, util.Timeout, util.Interval).Should(Succeed())
}

// TestAdmissionCheckDeletedWhileJobRuns: a job keeps running and completes
// when trainyard's check is taken off the ClusterQueue and its
// AdmissionCheck object deleted under it. (Kueue keeps an AdmissionCheck a
// ClusterQueue uses: it goes only once no queue lists it.)
func TestAdmissionCheckDeletedWhileJobRuns(t *testing.T) {
	g := NewWithT(t)
	ctx, c := context.Background(), env.fleet.Hub.Client
	makeRuntime(t, "torch-acdel", "15s")
	tj := submit(t, trainJob("acdel", "torch-acdel", 1, 1))
	wl, d := waitRunning(t, tj)

	var strategy *kueue.AdmissionChecksStrategy
	editQueue := func(g Gomega, edit func(*kueue.ClusterQueue)) {
		var cq kueue.ClusterQueue
		g.Expect(c.Get(ctx, client.ObjectKey{Name: "cq"}, &cq)).To(Succeed())
		edit(&cq)
		g.Expect(c.Update(ctx, &cq)).To(Succeed())
	}
	g.Eventually(func(g Gomega) {
		editQueue(g, func(cq *kueue.ClusterQueue) {
			strategy, cq.Spec.AdmissionChecksStrategy = cq.Spec.AdmissionChecksStrategy, nil
		})
	}, util.Timeout, util.Interval).Should(Succeed())
	g.Expect(strategy).NotTo(BeNil())
	g.Expect(c.Delete(ctx, &kueue.AdmissionCheck{ObjectMeta: metav1.ObjectMeta{Name: trainyard.CheckName}})).To(Succeed())
	t.Cleanup(func() {
		// Put the check back for the other tests and wait until it serves.
		g := NewWithT(t)
		g.Eventually(func(g Gomega) {
			err := c.Create(ctx, kueuetesting.MakeAdmissionCheck(trainyard.CheckName).ControllerName(admissioncheck.ControllerName).Obj())
			g.Expect(err == nil || apierrors.IsAlreadyExists(err)).To(BeTrue(), "%v", err)
			editQueue(g, func(cq *kueue.ClusterQueue) { cq.Spec.AdmissionChecksStrategy = strategy })
			var back kueue.AdmissionCheck
			g.Expect(c.Get(ctx, client.ObjectKey{Name: trainyard.CheckName}, &back)).To(Succeed())
			g.Expect(apimeta.IsStatusConditionTrue(back.Status.Conditions, kueue.AdmissionCheckActive)).To(BeTrue())
			var cq kueue.ClusterQueue
			g.Expect(c.Get(ctx, client.ObjectKey{Name: "cq"}, &cq)).To(Succeed())
			g.Expect(apimeta.IsStatusConditionTrue(cq.Status.Conditions, kueue.ClusterQueueActive)).To(BeTrue())
		}, util.Timeout, util.Interval).Should(Succeed())
	})
	g.Eventually(func(g Gomega) {
		err := c.Get(ctx, client.ObjectKey{Name: trainyard.CheckName}, &kueue.AdmissionCheck{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(wl), wl)).To(Succeed())
		g.Expect(wl.Status.AdmissionChecks).To(BeEmpty())
	}, util.Timeout, util.Interval).Should(Succeed())

	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tj), tj)).To(Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete)).To(BeTrue(), "conditions %v", tj.Status.Conditions)
	}, 2*util.Timeout, util.Interval).Should(Succeed())
	ds := dispatchesOf(g, wl)
	g.Expect(ds).To(HaveLen(1), "one attempt, never torn down")
	g.Expect(ds[0].Name).To(Equal(d.Name))
	g.Expect(ds[0].Status.Phase).To(Equal(v1alpha1.DispatchSucceeded))
}

// TestTargetDeletedWhileJobRunsIsDrained: deleting a Target that runs a
// job requeues the job on the other spoke; the deleted Target's agent
// cancels its copy first, and only then does the Target go.
func TestTargetDeletedWhileJobRunsIsDrained(t *testing.T) {
	g := NewWithT(t)
	ctx, c := context.Background(), env.fleet.Hub.Client
	makeRuntime(t, "torch-tgtdel", "10m")
	tj := submit(t, trainJob("tgtdel", "torch-tgtdel", 1, 2))
	wl, first := waitRunning(t, tj)
	gone := first.Spec.TargetName
	var target v1alpha1.Target
	g.Expect(c.Get(ctx, client.ObjectKey{Name: gone}, &target)).To(Succeed())
	g.Expect(target.Finalizers).To(ContainElement(dispatch.TargetFinalizer))
	orig := tytesting.MakeKubernetesTarget(gone, flavor).Obj()
	orig.Spec = *target.Spec.DeepCopy()
	orig.Labels, orig.Annotations = target.Labels, target.Annotations
	g.Expect(c.Delete(ctx, &target)).To(Succeed())
	t.Cleanup(func() {
		g := NewWithT(t)
		g.Eventually(func(g Gomega) {
			err := c.Create(ctx, orig.DeepCopy())
			g.Expect(err == nil || apierrors.IsAlreadyExists(err)).To(BeTrue(), "%v", err)
			var back v1alpha1.Target
			g.Expect(c.Get(ctx, client.ObjectKey{Name: gone}, &back)).To(Succeed())
			g.Expect(apimeta.IsStatusConditionTrue(back.Status.Conditions, v1alpha1.TargetAvailable)).To(BeTrue())
		}, 2*util.Timeout, util.Interval).Should(Succeed())
	})

	var second v1alpha1.Dispatch
	g.Eventually(func(g Gomega) {
		var live []v1alpha1.Dispatch
		for _, d := range dispatchesOf(g, wl) {
			if d.Spec.Attempt > first.Spec.Attempt && d.DeletionTimestamp.IsZero() {
				live = append(live, d)
			}
		}
		g.Expect(live).To(HaveLen(1))
		second = live[0]
		g.Expect(second.Spec.TargetName).NotTo(Equal(gone))
		g.Expect(second.Status.Phase).To(Equal(v1alpha1.DispatchRunning))
	}, 2*util.Timeout, util.Interval).Should(Succeed())
	g.Eventually(func(g Gomega) {
		err := c.Get(ctx, client.ObjectKey{Name: gone}, &v1alpha1.Target{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "target %s still there: %v", gone, err)
		rs := remoteJobSetsOf(t, tj)
		g.Expect(rs).To(HaveLen(1), "no copy left behind on %s", gone)
		g.Expect(rs[0].spoke).To(Equal(second.Spec.TargetName))
		g.Expect(eventMessages(g, wl, dispatch.EventRequeued)).To(ContainElement(ContainSubstring("target " + gone + " is being deleted")))
	}, util.Timeout, util.Interval).Should(Succeed())
}

// TestRemoteFailureBeforeReadyFailsTrainJob: the remote job fails while the
// hub is down, so the hub first sees the Dispatch Failed, never Running.
// The TrainJob fails all the same; nothing is retried.
func TestRemoteFailureBeforeReadyFailsTrainJob(t *testing.T) {
	g := NewWithT(t)
	ctx, c := context.Background(), env.fleet.Hub.Client
	rt := tytesting.MakeClusterTrainingRuntime("torch-earlyfail").Toleration(kube.KwokToleration).
		PodAnnotation("kwok.trainyard.dev/run-for", "1s").PodAnnotation("kwok.trainyard.dev/exit-code", "3").Obj()
	rt.Spec.Template.Spec.ReplicatedJobs[0].Template.Spec.BackoffLimit = ptr.To[int32](0)
	g.Expect(c.Create(ctx, rt)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(ctx, rt) })
	t.Cleanup(func() { _ = env.hub.Start() })
	// The agents are stopped while the hub places the job and the hub while
	// the agents run it: the hub never sees the work accepted before it
	// fails, whatever the machine's load. The leases are still fresh, so
	// the job is placed.
	for _, a := range env.agents {
		a.Stop()
	}
	t.Cleanup(func() {
		for _, a := range env.agents {
			_ = a.Start()
		}
	})
	tj := submit(t, trainJob("earlyfail", "torch-earlyfail", 1, 1))
	wl := util.WorkloadOf(g, c, tj)
	g.Eventually(func(g Gomega) {
		g.Expect(dispatchesOf(g, wl)).To(HaveLen(1))
	}, util.Timeout, 20*time.Millisecond).Should(Succeed())
	env.hub.Stop()
	for _, a := range env.agents {
		g.Expect(a.Start()).To(Succeed())
	}
	g.Eventually(func(g Gomega) {
		ds := dispatchesOf(g, wl)
		g.Expect(ds).To(HaveLen(1))
		g.Expect(ds[0].Status.Phase).To(Equal(v1alpha1.DispatchFailed))
	}, util.Timeout, util.Interval).Should(Succeed())
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(wl), wl)).To(Succeed())
	st, _ := checkState(wl)
	g.Expect(st).NotTo(Equal(kueue.CheckStateReady), "the hub saw the job run before it failed; the test proves nothing")
	g.Expect(env.hub.Start()).To(Succeed())

	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tj), tj)).To(Succeed())
		failed := apimeta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobFailed)
		g.Expect(failed).NotTo(BeNil(), "conditions %v", tj.Status.Conditions)
		g.Expect(failed.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(wl), wl)).To(Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadFinished)).To(BeTrue())
	}, util.Timeout, util.Interval).Should(Succeed())
	ds := dispatchesOf(g, wl)
	g.Expect(ds).To(HaveLen(1), "failed work is not retried")
	g.Expect(eventMessages(g, wl, dispatch.EventRequeued)).To(BeEmpty())
}

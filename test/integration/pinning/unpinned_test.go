package pinning

import (
	"context"
	"fmt"
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueconstants "sigs.k8s.io/kueue/pkg/controller/constants"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/snapshot"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// unlabelled is a TrainJob of runtime without the queue label, as a user
// who means to queue it later would create it.
func unlabelled(name, runtime string, suspend bool) *trainer.TrainJob {
	return tytesting.MakeTrainJob(name, tenant).Suspend(suspend).
		RuntimeRef(trainer.TrainingRuntimeKind, runtime).NumNodes(1).GPUsPerNode(1).Obj()
}

// TestQueueLabelAddedLaterIsRefused: a TrainJob created without the queue
// label is never pinned, so it cannot be queued later, suspended or not,
// by its tenant or an administrator, nor with pin annotations forged in the
// same update; one created with forged pin annotations is refused at
// creation. A pinned job still moves between queues.
func TestQueueLabelAddedLaterIsRefused(t *testing.T) {
	sourceRuntime(t, "later-src", 1)
	ctx := context.Background()
	for _, suspend := range []bool{true, false} {
		for who, c := range map[string]client.Client{"tenant": env.tenant, "admin": env.fleet.Hub.Client} {
			t.Run(fmt.Sprintf("suspend=%v by %s", suspend, who), func(t *testing.T) {
				g := NewWithT(t)
				tj := create(t, unlabelled(fmt.Sprintf("later-%v-%s", suspend, who), "later-src", suspend))
				g.Expect(tj.Annotations).NotTo(HaveKey(v1alpha1.AnnotationRuntimeHash), "an unlabelled job was pinned")
				tj.Labels = map[string]string{kueueconstants.QueueLabel: queue}
				g.Expect(c.Update(ctx, tj)).To(MatchError(ContainSubstring(snapshot.MsgQueueUnpinned)))
			})
		}
	}
	t.Run("with forged pin annotations", func(t *testing.T) {
		g := NewWithT(t)
		tj := create(t, unlabelled("later-forged", "later-src", true))
		tj.Labels = map[string]string{kueueconstants.QueueLabel: queue}
		tj.Annotations = map[string]string{v1alpha1.AnnotationRuntimeSource: "TrainingRuntime/later-src", v1alpha1.AnnotationRuntimeHash: "sha256:0123"}
		g.Expect(env.tenant.Update(ctx, tj)).To(MatchError(ContainSubstring(snapshot.MsgPinImmutable)))
	})
	t.Run("created unlabelled with forged pin annotations", func(t *testing.T) {
		tj := unlabelled("later-preset", "later-src", true)
		tj.Annotations = map[string]string{v1alpha1.AnnotationRuntimeSource: "TrainingRuntime/later-src", v1alpha1.AnnotationRuntimeHash: "sha256:0123"}
		NewWithT(t).Expect(env.tenant.Create(ctx, tj)).To(MatchError(ContainSubstring(snapshot.MsgPinPreset)))
	})
	t.Run("a pinned job changes queue", func(t *testing.T) {
		g := NewWithT(t)
		tj := create(t, tytesting.MakeTrainJob("later-pinned", tenant).Queue("other").Suspend(true).
			RuntimeRef(trainer.TrainingRuntimeKind, "later-src").NumNodes(1).GPUsPerNode(1).Obj())
		g.Expect(tj.Annotations).To(HaveKey(v1alpha1.AnnotationRuntimeHash))
		tj.Labels[kueueconstants.QueueLabel] = queue
		g.Expect(env.tenant.Update(ctx, tj)).To(Succeed())
	})
}

// TestUnpinnedQueuedJobIsRejected: a queued job whose runtime was not pinned
// — created while an administrator had the pinning webhook off, or
// labelled while the policy was off — gets no Workload (the hub's Kueue
// integration computes pod sets only from a pinned copy, never from the
// live runtime, so nothing holds quota for it) and fails with the reason,
// in an event and on the TrainJob; no Dispatch is ever made for it.
func TestUnpinnedQueuedJobIsRejected(t *testing.T) {
	src := sourceRuntime(t, "unpinned-src", 1)
	cases := map[string]func(t *testing.T) *trainer.TrainJob{
		"created while the webhook was off": func(t *testing.T) *trainer.TrainJob {
			var tj *trainer.TrainJob
			withoutAdmission(t, &admissionregv1.MutatingWebhookConfiguration{}, "trainyard-pin-runtime", func(g Gomega, try int) {
				tj = create(t, trainJob(fmt.Sprintf("webhook-off-%d", try), src.Name, queue))
				g.Expect(tj.Annotations).NotTo(HaveKey(v1alpha1.AnnotationRuntimeHash), "the webhook is still on")
			})
			return tj
		},
		"labelled while the policy was off": func(t *testing.T) *trainer.TrainJob {
			tj := create(t, unlabelled("policy-off", src.Name, true))
			withoutAdmission(t, &admissionregv1.ValidatingAdmissionPolicyBinding{}, snapshot.PinnedRuntimePolicyName, func(g Gomega, _ int) {
				g.Expect(env.tenant.Get(context.Background(), client.ObjectKeyFromObject(tj), tj)).To(Succeed())
				tj.Labels = map[string]string{kueueconstants.QueueLabel: queue}
				g.Expect(env.tenant.Update(context.Background(), tj)).To(Succeed())
			})
			return tj
		},
	}
	for name, makeJob := range cases {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			ctx, admin := context.Background(), env.fleet.Hub.Client
			tj := makeJob(t)
			g.Eventually(func(g Gomega) {
				g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(tj), tj)).To(Succeed())
				failed := apimeta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobFailed)
				g.Expect(failed).NotTo(BeNil())
				g.Expect(failed.Reason).To(Equal(v1alpha1.ReasonRuntimeNotPinned))
				g.Expect(failed.Message).To(And(ContainSubstring("was not pinned"), ContainSubstring("create it again with the label")))
			}, util.Timeout, util.Interval).Should(Succeed())
			g.Eventually(func(g Gomega) {
				var events eventsv1.EventList
				g.Expect(admin.List(ctx, &events, client.InNamespace(tenant))).To(Succeed())
				var msgs []string
				for _, e := range events.Items {
					if e.Regarding.UID == tj.UID && e.Type == corev1.EventTypeWarning {
						msgs = append(msgs, e.Note)
					}
				}
				g.Expect(msgs).To(ContainElement(ContainSubstring("was not pinned")))
			}, util.Timeout, util.Interval).Should(Succeed())
			var workloads kueue.WorkloadList
			g.Expect(admin.List(ctx, &workloads, client.InNamespace(tenant))).To(Succeed())
			for _, wl := range workloads.Items {
				for _, o := range wl.OwnerReferences {
					g.Expect(o.UID).NotTo(Equal(tj.UID), "an unpinned job got a Workload %s", wl.Name)
				}
			}
			var dispatches v1alpha1.DispatchList
			g.Expect(admin.List(ctx, &dispatches)).To(Succeed())
			for _, d := range dispatches.Items {
				g.Expect(d.Spec.TrainJob.UID).NotTo(Equal(tj.UID), "an unpinned job was dispatched")
			}
		})
	}
}

// withoutAdmission deletes the named admission object (the pinning webhook
// or the policy's binding), as an administrator turning it off would, runs
// do until it succeeds with the object's absence seen by the API server
// (try counts the attempts), and puts the object back, waiting until the
// API server enforces it again.
func withoutAdmission(t *testing.T, obj client.Object, name string, do func(g Gomega, try int)) {
	t.Helper()
	g := NewWithT(t)
	ctx, admin := context.Background(), env.fleet.Hub.Client
	g.Expect(admin.Get(ctx, client.ObjectKey{Name: name}, obj)).To(Succeed())
	saved := obj.DeepCopyObject().(client.Object)
	saved.SetResourceVersion("")
	saved.SetUID("")
	saved.SetCreationTimestamp(metav1.Time{})
	saved.SetManagedFields(nil)
	g.Expect(admin.Delete(ctx, obj)).To(Succeed())
	restored := false
	restore := func() {
		if !restored {
			restored = true
			g.Expect(admin.Create(ctx, saved.DeepCopyObject().(client.Object))).To(Succeed())
		}
	}
	t.Cleanup(restore)
	try := 0
	g.Eventually(func(g Gomega) {
		try++
		do(g, try)
	}, util.Timeout, util.Interval).Should(Succeed())
	restore()
	// Enforced again: an unlabelled job cannot be labelled, a labelled one is pinned.
	probe := create(t, unlabelled("probe-"+name, "unpinned-src", true))
	n := 0
	g.Eventually(func(g Gomega) {
		n++
		pinned := create(t, trainJob(fmt.Sprintf("probe-%s-%d", name, n), "unpinned-src", "other"))
		g.Expect(pinned.Annotations).To(HaveKey(v1alpha1.AnnotationRuntimeHash))
		var live trainer.TrainJob
		g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(probe), &live)).To(Succeed())
		live.Labels = map[string]string{kueueconstants.QueueLabel: "other"}
		// A dry run: a label that went through would stay, and pass from then on.
		g.Expect(admin.Update(ctx, &live, client.DryRunAll)).To(MatchError(ContainSubstring(snapshot.MsgQueueUnpinned)))
	}, util.Timeout, util.Interval).Should(Succeed())
}

package pinning

import (
	"context"
	"strings"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueconstants "sigs.k8s.io/kueue/pkg/controller/constants"
	kueuetesting "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/snapshot"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// sourceRuntime makes a TrainingRuntime in the tenant's namespace, as the
// tenant, and returns it as the API server stored it.
func sourceRuntime(t *testing.T, name string, nodes int32) *trainer.TrainingRuntime {
	t.Helper()
	ctx := context.Background()
	rt := &trainer.TrainingRuntime{Spec: tytesting.TorchRuntimeSpec(nodes)}
	rt.Name, rt.Namespace = name, tenant
	NewWithT(t).Expect(env.tenant.Create(ctx, rt)).To(Succeed())
	t.Cleanup(func() { _ = env.tenant.Delete(ctx, rt) })
	return rt
}

func trainJob(name, runtime, localQueue string) *trainer.TrainJob {
	return tytesting.MakeTrainJob(name, tenant).Queue(localQueue).
		RuntimeRef(trainer.TrainingRuntimeKind, runtime).NumNodes(1).GPUsPerNode(1).Obj()
}

// create creates tj as the tenant, once, and returns it as stored (pinned).
func create(t *testing.T, tj *trainer.TrainJob) *trainer.TrainJob {
	t.Helper()
	ctx := context.Background()
	tj = tj.DeepCopy()
	if err := env.tenant.Create(ctx, tj); err != nil {
		t.Fatalf("create TrainJob %s: %v", tj.Name, err)
	}
	t.Cleanup(func() { _ = env.fleet.Hub.Client.Delete(ctx, tj) })
	return tj
}

func pinnedCopy(t *testing.T, tj *trainer.TrainJob) *trainer.TrainingRuntime {
	t.Helper()
	var rt trainer.TrainingRuntime
	NewWithT(t).Expect(env.fleet.Hub.Client.Get(context.Background(),
		client.ObjectKey{Namespace: tenant, Name: copyName(t, tj)}, &rt)).To(Succeed())
	return &rt
}

// copyName is the pinned copy tj's pin annotations name.
func copyName(t *testing.T, tj *trainer.TrainJob) string {
	t.Helper()
	ref, err := snapshot.PinnedRef(tj)
	if err != nil {
		t.Fatalf("%s: %v", tj.Name, err)
	}
	return ref.Name
}

// TestPresetPinAnnotationsAreRefused: a tenant cannot create a job that
// claims to be pinned already, to any runtime.
func TestPresetPinAnnotationsAreRefused(t *testing.T) {
	sourceRuntime(t, "preset-src", 1)
	for _, key := range []string{v1alpha1.AnnotationRuntimeSource, v1alpha1.AnnotationRuntimeHash} {
		tj := trainJob("preset", "preset-src", queue)
		tj.Annotations = map[string]string{key: "sha256:0123"}
		err := env.tenant.Create(context.Background(), tj)
		if err == nil || !strings.Contains(err.Error(), "set by trainyard only") {
			t.Errorf("create with %s: %v, want the webhook's refusal", key, err)
		}
	}
}

// TestPinAnnotationsCannotChange: once pinned, a job's pin annotations
// stay as the webhook wrote them, whoever asks: a change is refused by the
// policy, a removal (as a re-applied manifest, which lacks them, makes) is
// undone by the keep-pin webhook.
func TestPinAnnotationsCannotChange(t *testing.T) {
	sourceRuntime(t, "ann-src", 1)
	tj := create(t, trainJob("ann", "ann-src", queue))
	if tj.Annotations[v1alpha1.AnnotationRuntimeHash] == "" {
		t.Fatalf("the job was not pinned: %v", tj.Annotations)
	}
	edits := map[string]func(*trainer.TrainJob){
		"another hash":     func(j *trainer.TrainJob) { j.Annotations[v1alpha1.AnnotationRuntimeHash] = "sha256:0123" },
		"another source":   func(j *trainer.TrainJob) { j.Annotations[v1alpha1.AnnotationRuntimeSource] = "TrainingRuntime/other" },
		"the hash removed": func(j *trainer.TrainJob) { delete(j.Annotations, v1alpha1.AnnotationRuntimeHash) },
		"both removed":     func(j *trainer.TrainJob) { j.Annotations = nil },
	}
	removal := map[string]bool{"the hash removed": true, "both removed": true}
	for name, edit := range edits {
		for who, c := range map[string]client.Client{"tenant": env.tenant, "admin": env.fleet.Hub.Client} {
			t.Run(name+" by "+who, func(t *testing.T) {
				g := NewWithT(t)
				var live trainer.TrainJob
				g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(tj), &live)).To(Succeed())
				edit(&live)
				err := c.Update(context.Background(), &live)
				if !removal[name] {
					g.Expect(err).To(MatchError(ContainSubstring(snapshot.MsgPinImmutable)))
					return
				}
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(tj), &live)).To(Succeed())
				for _, k := range []string{v1alpha1.AnnotationRuntimeSource, v1alpha1.AnnotationRuntimeHash} {
					g.Expect(live.Annotations).To(HaveKeyWithValue(k, tj.Annotations[k]))
				}
			})
		}
	}
}

// TestPinnedCopyIsProtected: a tenant can neither edit, unmark nor delete
// the copy its jobs run, whatever its labels say, so it cannot swap the
// content for a bigger one.
func TestPinnedCopyIsProtected(t *testing.T) {
	sourceRuntime(t, "prot-src", 1)
	tj := create(t, trainJob("prot", "prot-src", queue))
	cases := map[string]struct {
		edit func(*trainer.TrainingRuntime)
		msg  string
	}{
		"a bigger spec":        {edit: func(rt *trainer.TrainingRuntime) { rt.Spec = tytesting.TorchRuntimeSpec(8) }, msg: snapshot.MsgSpecImmutable},
		"the label removed":    {edit: func(rt *trainer.TrainingRuntime) { rt.Labels = nil }, msg: snapshot.MsgLabelKept},
		"the annotations gone": {edit: func(rt *trainer.TrainingRuntime) { rt.Annotations = nil }, msg: snapshot.MsgPinImmutable},
		"unmarked, then bigger": {edit: func(rt *trainer.TrainingRuntime) {
			rt.Labels, rt.Annotations = nil, nil
			rt.Spec = tytesting.TorchRuntimeSpec(8)
		}, msg: snapshot.MsgSpecImmutable},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rt := pinnedCopy(t, tj)
			tc.edit(rt)
			NewWithT(t).Expect(env.tenant.Update(context.Background(), rt)).To(MatchError(ContainSubstring(tc.msg)))
		})
	}
	t.Run("deleted", func(t *testing.T) {
		err := env.tenant.Delete(context.Background(), pinnedCopy(t, tj))
		NewWithT(t).Expect(err).To(MatchError(ContainSubstring(snapshot.MsgDeleteRefused)))
		NewWithT(t).Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
	})
	// Harmless metadata still changes.
	rt := pinnedCopy(t, tj)
	rt.Labels["team"] = "a"
	NewWithT(t).Expect(env.tenant.Update(context.Background(), rt)).To(Succeed())
}

// TestSquattedCopyIsRefused: a tenant who makes a runtime under the name
// the webhook will compute, with other content and forged pin marks, gets
// its jobs refused rather than run on the forged content.
func TestSquattedCopyIsRefused(t *testing.T) {
	src := sourceRuntime(t, "squat-src", 1)
	_, hash, err := snapshot.Encode(src.Spec)
	if err != nil {
		t.Fatal(err)
	}
	forged := &trainer.TrainingRuntime{Spec: tytesting.TorchRuntimeSpec(8)}
	forged.Name, forged.Namespace = "squat-src-"+strings.TrimPrefix(hash, "sha256:")[:12], tenant
	forged.Labels = map[string]string{v1alpha1.LabelPinnedRuntime: "true"}
	forged.Annotations = map[string]string{v1alpha1.AnnotationRuntimeHash: hash, v1alpha1.AnnotationRuntimeSource: "TrainingRuntime/squat-src"}
	g := NewWithT(t)
	g.Expect(env.tenant.Create(context.Background(), forged)).To(Succeed())
	t.Cleanup(func() { _ = env.fleet.Hub.Client.Delete(context.Background(), forged) })

	err = env.tenant.Create(context.Background(), trainJob("squat", "squat-src", queue))
	g.Expect(err).To(MatchError(And(ContainSubstring("holds other content"), ContainSubstring(forged.Name))))
}

// TestChangedCopyIsNotDispatched: a pinned copy swapped for bigger content
// by a client the policy lets through (an administrator deletes it and
// makes it again under the same name and marks) is refused at dispatch:
// the job never runs on a spec other than the one it was pinned to.
func TestChangedCopyIsNotDispatched(t *testing.T) {
	g := NewWithT(t)
	ctx, admin := context.Background(), env.fleet.Hub.Client
	held := kueuetesting.MakeLocalQueue("held", tenant).ClusterQueue("cq").StopPolicy(kueue.Hold).Obj()
	g.Expect(admin.Create(ctx, held)).To(Succeed())
	t.Cleanup(func() { _ = admin.Delete(ctx, held) })
	sourceRuntime(t, "swap-src", 1)
	tj := create(t, trainJob("swap", "swap-src", "held"))

	old := pinnedCopy(t, tj)
	g.Expect(admin.Delete(ctx, old)).To(Succeed())
	swapped := &trainer.TrainingRuntime{Spec: tytesting.TorchRuntimeSpec(2)}
	swapped.Name, swapped.Namespace, swapped.Labels, swapped.Annotations = old.Name, tenant, old.Labels, old.Annotations
	g.Expect(admin.Create(ctx, swapped)).To(Succeed())

	g.Eventually(func(g Gomega) {
		g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(held), held)).To(Succeed())
		held.Spec.StopPolicy = nil
		g.Expect(admin.Update(ctx, held)).To(Succeed())
	}, util.Timeout, util.Interval).Should(Succeed())
	g.Eventually(func(g Gomega) {
		var events corev1.EventList
		g.Expect(admin.List(ctx, &events, client.InNamespace(tenant))).To(Succeed())
		var msgs []string
		for _, e := range events.Items {
			if e.InvolvedObject.Kind == "Workload" && strings.Contains(e.Message, old.Name) {
				msgs = append(msgs, e.Message)
			}
		}
		g.Expect(msgs).To(ContainElement(And(ContainSubstring("cannot snapshot the runtime"),
			ContainSubstring("changed after the job was created"), ContainSubstring(tj.Annotations[v1alpha1.AnnotationRuntimeHash]))))
	}, util.Timeout, util.Interval).Should(Succeed())
}

// TestUnreferencedCopiesAreCollected: a pinned copy goes once the last job
// that used it is gone and the grace period has passed, not before.
func TestUnreferencedCopiesAreCollected(t *testing.T) {
	g := NewWithT(t)
	ctx, admin := context.Background(), env.fleet.Hub.Client
	sourceRuntime(t, "gc-src", 1)
	first := create(t, trainJob("gc-first", "gc-src", queue))
	second := create(t, trainJob("gc-second", "gc-src", queue))
	g.Expect(copyName(t, second)).To(Equal(copyName(t, first)))
	key := client.ObjectKey{Namespace: tenant, Name: copyName(t, first)}

	g.Expect(admin.Delete(ctx, first)).To(Succeed())
	g.Consistently(func() error {
		return admin.Get(ctx, key, &trainer.TrainingRuntime{})
	}, 3*gcGrace, 500*time.Millisecond).Should(Succeed(), "the copy went while gc-second still uses it")

	g.Expect(admin.Delete(ctx, second)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(admin.Get(ctx, key, &trainer.TrainingRuntime{}))
	}, util.Timeout, util.Interval).Should(BeTrue(), "the unreferenced copy %s was not collected", key.Name)

	// A new job of the same content gets the copy made again.
	third := create(t, trainJob("gc-third", "gc-src", queue))
	g.Expect(copyName(t, third)).To(Equal(key.Name))
	g.Expect(admin.Get(ctx, key, &trainer.TrainingRuntime{})).To(Succeed())
}

// TestQueueChangeWhileRunningIsRefused: the queue label of a TrainJob that
// is not suspended never changes, as Kueue's own TrainJob webhook refused
// before the hub took over the integration; a suspended job still moves.
func TestQueueChangeWhileRunningIsRefused(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	sourceRuntime(t, "requeue-src", 1)
	tj := create(t, trainJob("requeue", "requeue-src", "other"))
	var live trainer.TrainJob
	g.Expect(env.tenant.Get(ctx, client.ObjectKeyFromObject(tj), &live)).To(Succeed())
	running := live.DeepCopy()
	running.Spec.Suspend = ptr.To(false)
	running.Labels[kueueconstants.QueueLabel] = queue
	g.Expect(env.tenant.Update(ctx, running, client.DryRunAll)).To(MatchError(ContainSubstring(snapshot.MsgQueueWhileRunning)))
	live.Labels[kueueconstants.QueueLabel] = queue
	g.Expect(env.tenant.Update(ctx, &live, client.DryRunAll)).To(Succeed())
}

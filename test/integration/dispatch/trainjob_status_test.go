package dispatch

import (
	"context"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	kftrainerruntime "github.com/kubeflow/trainer/v2/pkg/runtime"
	kftrainercore "github.com/kubeflow/trainer/v2/pkg/runtime/core"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueconstants "sigs.k8s.io/kueue/pkg/controller/constants"
	kueuetesting "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"
	"sigs.k8s.io/yaml"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/dispatch"
	"github.com/trainyard-dev/trainyard/hub/snapshot"
	"github.com/trainyard-dev/trainyard/test/util"
)

const futureField = "futureField"

// withFutureStatusField adds status.futureField to the hub's TrainJob CRD
// (Trainer v2.3's, as installed), standing for a field a newer Trainer adds
// and trainyard's Go types do not know, and removes it when the test ends.
func withFutureStatusField(t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	ctx, c := context.Background(), env.fleet.Hub.Client
	edit := func(add bool) error {
		var crd apiextv1.CustomResourceDefinition
		if err := c.Get(ctx, client.ObjectKey{Name: "trainjobs.trainer.kubeflow.org"}, &crd); err != nil {
			return err
		}
		for i := range crd.Spec.Versions {
			status := crd.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["status"]
			if add {
				status.Properties[futureField] = apiextv1.JSONSchemaProps{Type: "string"}
			} else {
				delete(status.Properties, futureField)
			}
			crd.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["status"] = status
		}
		return c.Update(ctx, &crd)
	}
	g.Eventually(func() error { return edit(true) }, util.Timeout, util.Interval).Should(Succeed())
	t.Cleanup(func() {
		NewWithT(t).Eventually(func() error { return edit(false) }, util.Timeout, util.Interval).Should(Succeed())
	})
}

func unstructuredTrainJob(g Gomega, tj *trainer.TrainJob) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(trainer.GroupVersion.WithKind(trainer.TrainJobKind))
	g.Expect(env.fleet.Hub.Client.Get(context.Background(), client.ObjectKeyFromObject(tj), u)).To(Succeed())
	return u
}

// TestTrainJobStatusKeepsFieldsTrainyardDoesNotKnow: the hub mirrors a
// job's progress into its TrainJob status by server-side apply as
// trainyard-hub, and a status field its Go types do not know, set by
// another writer before the job ran, is still there when the job completes.
func TestTrainJobStatusKeepsFieldsTrainyardDoesNotKnow(t *testing.T) {
	g := NewWithT(t)
	ctx, c := context.Background(), env.fleet.Hub.Client
	withFutureStatusField(t)
	makeRuntime(t, "torch-future", "8s")
	tj := submit(t, trainJob("future", "torch-future", 1, 2))

	// The API server prunes the field until it serves the edited schema.
	patch := client.RawPatch(types.MergePatchType, []byte(`{"status":{"futureField":"from-a-newer-trainer"}}`))
	g.Eventually(func(g Gomega) {
		u := unstructuredTrainJob(g, tj)
		g.Expect(c.Status().Patch(ctx, u, patch)).To(Succeed())
		got, _, _ := unstructured.NestedString(unstructuredTrainJob(g, tj).Object, "status", futureField)
		g.Expect(got).To(Equal("from-a-newer-trainer"))
	}, util.Timeout, util.Interval).Should(Succeed())
	// The hub has yet to write the job's completion after the field was set.
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tj), tj)).To(Succeed())
	g.Expect(apimeta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobComplete)).To(BeNil(),
		"the job completed before the test set %s; the test proves nothing", futureField)

	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tj), tj)).To(Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete)).To(BeTrue(), "conditions %v", tj.Status.Conditions)
	}, util.Timeout, util.Interval).Should(Succeed())
	g.Expect(tj.Status.JobsStatus).To(ContainElement(HaveField("Name", "node")))
	g.Expect(apimeta.IsStatusConditionTrue(tj.Status.Conditions, v1alpha1.TrainJobCreated)).To(BeTrue())

	u := unstructuredTrainJob(g, tj)
	got, _, _ := unstructured.NestedString(u.Object, "status", futureField)
	g.Expect(got).To(Equal("from-a-newer-trainer"), "the hub's status writes erased %s", futureField)
	var hubWrites []metav1.ManagedFieldsEntry
	for _, m := range u.GetManagedFields() {
		if m.Manager == dispatch.FieldOwner {
			hubWrites = append(hubWrites, m)
		}
	}
	g.Expect(hubWrites).To(ConsistOf(And(HaveField("Operation", metav1.ManagedFieldsOperationApply),
		HaveField("Subresource", "status"))), "managed fields %v", u.GetManagedFields())
}

// trainerWritesSnapshot runs Trainer v2.3's own runtime code against the hub
// for tj, as Trainer's TrainJob controller would if it reconciled the job:
// it writes the <trainjob>-runtime-snapshot ConfigMap.
func trainerWritesSnapshot(t *testing.T, tj *trainer.TrainJob) *corev1.ConfigMap {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	// Trainer reads through its manager's cache, which sets kind and
	// apiVersion on what it returns; its snapshot YAML carries them.
	direct, err := client.NewWithWatch(env.fleet.Hub.Config, client.Options{Scheme: env.fleet.Hub.Client.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	c := interceptor.NewClient(direct, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			gvk, err := c.GroupVersionKindFor(obj)
			if err == nil {
				obj.GetObjectKind().SetGroupVersionKind(gvk)
			}
			return err
		},
	})
	runtimes, err := kftrainercore.New(ctx, c, noopIndexer{}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = runtimes[kftrainerruntime.RuntimeRefToRuntimeRegistryKey(tj.Spec.RuntimeRef)].NewObjects(ctx, tj)
	g.Expect(err).NotTo(HaveOccurred())
	var cm corev1.ConfigMap
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: tj.Namespace, Name: tj.Name + snapshot.TrainerSnapshotSuffix}, &cm)).To(Succeed())
	return &cm
}

type noopIndexer struct{}

func (noopIndexer) IndexField(context.Context, client.Object, string, client.IndexerFunc) error {
	return nil
}

// heldWithTrainerSnapshot submits a TrainJob name to a LocalQueue that does
// not exist yet, so Kueue cannot admit it, lets Trainer's code snapshot its
// (pinned) runtime, and returns a function that creates the queue.
func heldWithTrainerSnapshot(t *testing.T, name string) (*trainer.TrainJob, *corev1.ConfigMap, func()) {
	t.Helper()
	g := NewWithT(t)
	ctx, c := context.Background(), env.fleet.Hub.Client
	makeRuntime(t, "torch-"+name, "2s")
	q := kueuetesting.MakeLocalQueue("lq-"+name, tenant).ClusterQueue("cq").Obj()
	t.Cleanup(func() { _ = c.Delete(ctx, q) }) // runs after the job's own clean-up
	tj := trainJob(name, "torch-"+name, 1, 1)
	tj.Labels[kueueconstants.QueueLabel] = q.Name
	submit(t, tj)
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tj), tj)).To(Succeed())
	cm := trainerWritesSnapshot(t, tj)
	g.Expect(metav1.GetControllerOf(cm)).To(HaveField("UID", tj.UID))
	return tj, cm, func() { g.Expect(c.Create(ctx, q)).To(Succeed()) }
}

// TestDispatchAgreesWithTrainersSnapshot: where Trainer has snapshotted the
// job's runtime (its ConfigMap, written by Trainer's own code), the hub
// dispatches that same spec: the Dispatch's hash is the pinned one, the
// ConfigMap is left as Trainer wrote it, and the job runs.
func TestDispatchAgreesWithTrainersSnapshot(t *testing.T) {
	g := NewWithT(t)
	ctx, c := context.Background(), env.fleet.Hub.Client
	tj, cm, release := heldWithTrainerSnapshot(t, "trainer-snap")
	release()

	wl, d := waitRunning(t, tj)
	g.Expect(d.Spec.Runtime.Hash).To(Equal(tj.Annotations[v1alpha1.AnnotationRuntimeHash]))
	var after corev1.ConfigMap
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(cm), &after)).To(Succeed())
	g.Expect(after.ResourceVersion).To(Equal(cm.ResourceVersion), "the hub changed Trainer's snapshot")
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(wl), wl)).To(Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadFinished)).To(BeTrue())
	}, util.Timeout, util.Interval).Should(Succeed())
}

// TestTrainersDifferentSnapshotIsNotDispatched: a Trainer snapshot of the
// job that holds another spec than the pinned runtime (here: edited after
// Trainer wrote it) is never dispatched, since Kueue's pod sets, the remote
// render and Trainer would each run a different job.
func TestTrainersDifferentSnapshotIsNotDispatched(t *testing.T) {
	g := NewWithT(t)
	ctx, c := context.Background(), env.fleet.Hub.Client
	tj, cm, release := heldWithTrainerSnapshot(t, "trainer-edited")
	var rt map[string]any
	g.Expect(yaml.Unmarshal([]byte(cm.Data[snapshot.TrainerSnapshotKey]), &rt)).To(Succeed())
	g.Expect(unstructured.SetNestedField(rt, "yes", "spec", "template", "metadata", "labels", "edited")).To(Succeed())
	edited, err := yaml.Marshal(rt)
	g.Expect(err).NotTo(HaveOccurred())
	cm.Data[snapshot.TrainerSnapshotKey] = string(edited)
	g.Expect(c.Update(ctx, cm)).To(Succeed())
	release()

	wl := util.WorkloadOf(g, c, tj)
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(wl), wl)).To(Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved)).To(BeTrue())
	}, util.Timeout, util.Interval).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(dispatchesOf(g, wl)).To(BeEmpty())
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(wl), wl)).To(Succeed())
		state, _ := checkState(wl)
		g.Expect(state).NotTo(Equal(kueue.CheckStateReady))
	}, 10*time.Second, util.Interval).Should(Succeed())
}

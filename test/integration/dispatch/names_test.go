package dispatch

import (
	"context"
	"strconv"
	"strings"
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// TestLongestTrainJobNameRunsEndToEnd: a TrainJob with a 63-character name
// (its Workload's is 78) on Trainer's shipped torch-distributed-with-cache
// runtime, whose dataset-initializer step must finish before the node
// starts, runs to completion on a spoke in its first attempt. Every name
// and label on the way fits: the Dispatch, the remote JobSet, its Jobs and
// pods.
func TestLongestTrainJobNameRunsEndToEnd(t *testing.T) {
	ctx, g, c := context.Background(), NewWithT(t), env.fleet.Hub.Client
	shipped, err := tytesting.ShippedRuntime(tytesting.TrainerTorchWithCache)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(shipped.Spec.Template.Spec.ReplicatedJobs[0].Name).To(Equal("dataset-initializer"))
	rt := (&tytesting.ClusterTrainingRuntimeWrapper{ClusterTrainingRuntime: *shipped}).
		Toleration(kube.KwokToleration).PodAnnotation("kwok.trainyard.dev/run-for", "2s").Obj()
	rt.Name = "names-torch-with-cache"
	g.Expect(c.Create(ctx, rt)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(ctx, rt) })
	// The initializer runs as the service account Trainer's install makes,
	// which an operator adds to the tenant's namespace and the Target allows.
	for _, s := range env.fleet.Spokes {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: spokeNS}}
		g.Expect(client.IgnoreAlreadyExists(s.Client.Create(ctx, ns))).To(Succeed())
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: spokeNS,
			Name: shipped.Spec.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.ServiceAccountName}}
		g.Expect(client.IgnoreAlreadyExists(s.Client.Create(ctx, sa))).To(Succeed())
		t.Cleanup(func() { _ = s.Client.Delete(ctx, sa) })
	}

	name := "names-" + strings.Repeat("x", 50) + "-run-07"
	g.Expect(validation.IsDNS1035Label(name)).To(BeEmpty())
	g.Expect(name).To(HaveLen(63))
	tj := submit(t, trainJob(name, rt.Name, 2, 1))
	wl := util.WorkloadOf(g, c, tj)
	g.Expect(len(wl.Name)).To(BeNumerically(">", 63), "Kueue's Workload name %q", wl.Name)

	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tj), tj)).To(Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete)).To(BeTrue(),
			"conditions %v", tj.Status.Conditions)
	}, util.Timeout, util.Interval).Should(Succeed())

	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(wl), wl)).To(Succeed())
	g.Expect(wl.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationAttempt, "1"), "attempts burned on the way")
	state, msg := checkState(wl)
	g.Expect(state).To(Equal(kueue.CheckStateReady), msg)
	ds := dispatchesOf(g, wl)
	g.Expect(ds).To(HaveLen(1))
	d := ds[0]
	g.Expect(d.Spec.Attempt).To(Equal(int32(1)))
	g.Expect(d.Status.Phase).To(Equal(v1alpha1.DispatchSucceeded))
	g.Expect(d.Spec.Workload.Name).To(Equal(wl.Name))
	g.Expect(validation.IsDNS1123Label(d.Name)).To(BeEmpty())
	for k, v := range d.Labels {
		g.Expect(validation.IsValidLabelValue(v)).To(BeEmpty(), "Dispatch label %s=%q", k, v)
	}
	g.Expect(d.Labels).To(HaveKeyWithValue(v1alpha1.LabelWorkloadName, v1alpha1.LabelValue(wl.Name)))

	remote := remoteJobSetsOf(t, tj)
	g.Expect(remote).To(HaveLen(1))
	js := remote[0].js
	g.Expect(len(js.Name)).To(BeNumerically("<=", backends.MaxRemoteName))
	g.Expect(js.Spec.ReplicatedJobs).To(HaveLen(2))
	g.Expect(js.Spec.ReplicatedJobs[0].Name).To(Equal("dataset-initializer"))
	g.Expect(js.Labels).To(HaveKeyWithValue(v1alpha1.LabelDispatchName, d.Name))
	g.Expect(js.Labels).To(HaveKeyWithValue(v1alpha1.LabelAttempt, strconv.Itoa(1)))
	g.Expect(tj.Status.JobsStatus).To(ContainElements(HaveField("Name", "dataset-initializer"), HaveField("Name", "node")))
}

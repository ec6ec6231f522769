package jobset

import (
	"context"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/jobset"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// Tests of Trainer's own runtimes, as Trainer ships them, on the spoke. The
// runtimes are not edited: what makes their pods run on this spoke's kwok
// nodes is a runtime patch in the TrainJob, as a user of a tainted cluster
// would write one.

// kwokPatch tolerates the kwok nodes' taint in the pods of the named
// replicated jobs and has them run for runFor.
func kwokPatch(runFor string, jobs ...string) trainer.RuntimePatch {
	var rjs []trainer.ReplicatedJobPatch
	for _, name := range jobs {
		rjs = append(rjs, trainer.ReplicatedJobPatch{Name: name, Template: &trainer.JobTemplatePatch{
			Spec: &trainer.JobSpecPatch{Template: &trainer.PodTemplatePatch{
				Metadata: &metav1.ObjectMeta{Annotations: map[string]string{"kwok.trainyard.dev/run-for": runFor}},
				Spec:     &trainer.PodSpecPatch{Tolerations: []corev1.Toleration{kube.KwokToleration}},
			}},
		}})
	}
	return trainer.RuntimePatch{Manager: "team-a.example.com/kwok", TrainingRuntimeSpec: &trainer.TrainingRuntimeSpecPatch{
		Template: &trainer.JobSetTemplatePatch{Spec: &trainer.JobSetSpecPatch{ReplicatedJobs: rjs}},
	}}
}

// shippedDispatch is a Dispatch named name of tj (a bare TrainJob when
// nil) on Trainer's runtime at runtimePath, with kwokPatch for jobs.
func shippedDispatch(g Gomega, name, runtimePath string, tj *trainer.TrainJob, runFor string, podSets ...v1alpha1.PodSetPlacement) *v1alpha1.Dispatch {
	rt, err := tytesting.ShippedRuntime(runtimePath)
	g.Expect(err).NotTo(HaveOccurred())
	if tj == nil {
		tj = tytesting.MakeTrainJob("train-"+name, "team-a").RuntimeRef(trainer.ClusterTrainingRuntimeKind, rt.Name).Obj()
	}
	var jobs []string
	for _, ps := range podSets {
		jobs = append(jobs, ps.Name)
	}
	tj.Spec.RuntimePatches = append(tj.Spec.RuntimePatches, kwokPatch(runFor, jobs...))
	return tytesting.MakeDispatch(name, "trainyard-spoke", "spoke").
		SnapshotTrainJob(tj).SnapshotRuntime(v1alpha1.RuntimeKindClusterTrainingRuntime, rt.Name, rt.Spec).
		PodSets(podSets...).Obj()
}

// expectOwnedByJobSet: each of objs exists and is controlled by JobSet name.
func expectOwnedByJobSet(g Gomega, name string, objs ...client.Object) {
	for _, o := range objs {
		g.Expect(spoke.Client.Get(context.Background(), client.ObjectKeyFromObject(o), o)).To(Succeed(), "%T %s", o, o.GetName())
		owners := o.GetOwnerReferences()
		g.Expect(owners).To(HaveLen(1), "%s owners", o.GetName())
		g.Expect(owners[0].Kind).To(Equal(jobset.Kind))
		g.Expect(owners[0].Name).To(Equal(name))
		g.Expect(ptr.Deref(owners[0].Controller, false)).To(BeTrue(), "%s is not controlled by its JobSet", o.GetName())
	}
}

// expectGone waits until the garbage collector removed each of objs.
func expectGone(g Gomega, objs ...client.Object) {
	g.Eventually(func(g Gomega) {
		for _, o := range objs {
			err := spoke.Client.Get(context.Background(), client.ObjectKeyFromObject(o), o)
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s outlived its JobSet: %v", o.GetName(), err)
		}
	}, util.Timeout, util.Interval).Should(Succeed())
}

// podVolumes maps a pod's Secret and ConfigMap volumes to the objects they
// name.
func podVolumes(p corev1.Pod) map[string]string {
	out := map[string]string{}
	for _, v := range p.Spec.Volumes {
		switch {
		case v.Secret != nil:
			out[v.Name] = v.Secret.SecretName
		case v.ConfigMap != nil:
			out[v.Name] = v.ConfigMap.Name
		}
	}
	return out
}

// expectSucceedsAndAdopts waits until d's JobSet succeeded, then checks a
// Submit after a lost answer adopts it.
func expectSucceedsAndAdopts(g Gomega, b *jobset.Backend, d *v1alpha1.Dispatch, ref *v1alpha1.RemoteRef) {
	g.Eventually(func(g Gomega) {
		st := observe(g, b, d)
		g.Expect(st.Phase).To(Equal(v1alpha1.DispatchSucceeded), "reason %s: %s", st.Reason, st.Message)
	}, util.Timeout, util.Interval).Should(Succeed())
	again, err := b.Submit(context.Background(), d)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(ref))
}

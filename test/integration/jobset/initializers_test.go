package jobset

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	jobsetapi "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/jobset"
	"github.com/trainyard-dev/trainyard/backends/kubework"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// podsOfJob are the pods of JobSet name's replicated job rj.
func podsOfJob(g Gomega, name, rj string) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range podsOf(g, name) {
		if p.Labels[jobsetapi.ReplicatedJobNameKey] == rj {
			out = append(out, p)
		}
	}
	return out
}

// TestInitializerRunsBeforeTrainer: Trainer's torch-distributed-with-cache
// runtime, as shipped, runs its dataset initializer to completion before
// the trainer's nodes start (dependsOn), and the Dispatch succeeds only
// when the nodes do.
func TestInitializerRunsBeforeTrainer(t *testing.T) {
	ctx, g := context.Background(), NewWithT(t)
	// The runtime's initializer runs as this service account, which the
	// spoke's administrator makes (Trainer's installation does, in a
	// single cluster).
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: jobsNS}}
	if err := spoke.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: jobsNS, Name: "kubeflow-trainer-cache-initializer"}}
	if err := spoke.Client.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	b := jobset.New(cached, jobset.Options{Namespace: jobsPrefix, TopologyLevels: []string{rackLabel}, LiveReader: spoke.Client,
		Policy: kubework.PodPolicy{Allowed: v1alpha1.AllowedPodFields{ServiceAccountNames: []string{sa.Name}, TolerationKeys: kwokAllowed.TolerationKeys}}})
	d := shippedDispatch(g, "cache", tytesting.TrainerTorchWithCache, nil, "3s",
		v1alpha1.PodSetPlacement{Name: "dataset-initializer", Count: 1}, v1alpha1.PodSetPlacement{Name: "node", Count: 1})
	ref, err := b.Submit(ctx, d)
	g.Expect(err).NotTo(HaveOccurred())
	name := ref.Name

	g.Eventually(func(g Gomega) {
		st := observe(g, b, d)
		g.Expect(st.Phase).To(Equal(v1alpha1.DispatchSucceeded), "reason %s: %s", st.Reason, st.Message)
		g.Expect(st.Replicas).To(ConsistOf(
			v1alpha1.ReplicaStatus{Name: "dataset-initializer", Succeeded: 1},
			v1alpha1.ReplicaStatus{Name: "node", Succeeded: 1}))
	}, util.Timeout, util.Interval).Should(Succeed())

	inits, nodes := podsOfJob(g, name, "dataset-initializer"), podsOfJob(g, name, "node")
	g.Expect(inits).To(HaveLen(1))
	g.Expect(nodes).To(HaveLen(1))
	g.Expect(inits[0].Spec.ServiceAccountName).To(Equal(sa.Name))
	var finished time.Time
	for _, cs := range inits[0].Status.ContainerStatuses {
		g.Expect(cs.State.Terminated).NotTo(BeNil())
		finished = cs.State.Terminated.FinishedAt.Time
	}
	// Timestamps have one-second resolution.
	g.Expect(nodes[0].CreationTimestamp.Time).NotTo(BeTemporally("<", finished.Truncate(time.Second)),
		"the trainer's pod was made before the initializer finished")

	util.CancelUntilGone(g, b, d)
	g.Expect(jobSetsOf(g, d)).To(BeEmpty())
}

// TestVolumeClaimPoliciesMakeSharedClaim: Trainer's torchtune Llama 3.2 1B
// runtime, as shipped, passes the JobSet webhook with its volume claim
// policy; the JobSet controller makes the one claim both initializers and
// the trainer mount, owned by the JobSet; the trainer's pods wait for the
// initializers, and Cancel removes the claim with the JobSet.
func TestVolumeClaimPoliciesMakeSharedClaim(t *testing.T) {
	ctx, g := context.Background(), NewWithT(t)
	b := agentBackend()
	// The initializers run far longer than the test, so the trainer's
	// nodes must not start whether or not the spoke can bind the claim.
	d := shippedDispatch(g, "tune", tytesting.TrainerTorchtuneLlama1B, nil, "10m",
		v1alpha1.PodSetPlacement{Name: "dataset-initializer", Count: 1},
		v1alpha1.PodSetPlacement{Name: "model-initializer", Count: 1},
		v1alpha1.PodSetPlacement{Name: "node", Count: 1})
	ref, err := b.Submit(ctx, d)
	g.Expect(err).NotTo(HaveOccurred())
	name := ref.Name

	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: jobsNS, Name: "initializer-" + name}}
	g.Eventually(func(g Gomega) { expectOwnedByJobSet(g, name, claim) }, util.Timeout, util.Interval).Should(Succeed())
	g.Expect(claim.Spec.AccessModes).To(ConsistOf(corev1.ReadWriteOnce))
	g.Expect(claim.Spec.Resources.Requests).To(HaveKeyWithValue(corev1.ResourceStorage, resource.MustParse("20Gi")))

	g.Eventually(func(g Gomega) {
		for _, rj := range []string{"dataset-initializer", "model-initializer"} {
			pods := podsOfJob(g, name, rj)
			g.Expect(pods).To(HaveLen(1), rj)
			g.Expect(claimsOf(pods[0])).To(HaveKeyWithValue("initializer", claim.Name), rj)
		}
	}, util.Timeout, util.Interval).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(podsOfJob(g, name, "node")).To(BeEmpty(), "the trainer started before its initializers completed")
		g.Expect(observe(g, b, d).Phase).To(Equal(v1alpha1.DispatchSubmitted))
	}, 3*time.Second, util.Interval).Should(Succeed())

	util.CancelUntilGone(g, b, d)
	expectGone(g, claim)
}

// claimsOf maps a pod's volumes to the claims they name.
func claimsOf(p corev1.Pod) map[string]string {
	out := map[string]string{}
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			out[v.Name] = v.PersistentVolumeClaim.ClaimName
		}
	}
	return out
}

package fleet

import (
	"context"
	"os"
	"testing"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobset "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/test/util"
)

// addReadyNodes adds kwok nodes to spoke and waits until they are Ready and
// untainted.
func addReadyNodes(t *testing.T, spoke *kube.Cluster, nodes ...kube.NodeSpec) {
	t.Helper()
	ctx, g := context.Background(), NewWithT(t)
	g.Expect(spoke.AddKwokNodes(ctx, nodes...)).To(Succeed())
	g.Eventually(func(g Gomega) {
		for _, n := range nodes {
			var node corev1.Node
			g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: n.Name}, &node)).To(Succeed())
			g.Expect(node.Spec.Taints).To(BeEmpty(), "node %s", n.Name)
			g.Expect(nodeReady(&node)).To(BeTrue(), "node %s not Ready", n.Name)
		}
	}, util.Timeout, util.Interval).Should(Succeed())
}

// cpuNodes are two kwok nodes without GPUs, so the GPU tests' pods never
// land there.
func cpuNodes(spoke *kube.Cluster, prefix string) []kube.NodeSpec {
	return []kube.NodeSpec{{Name: spoke.Name + "-" + prefix + "-0"}, {Name: spoke.Name + "-" + prefix + "-1"}}
}

// TestSpokePodWithoutTolerationSchedules: a pod with no toleration and no
// node selector, as upstream runtimes render them, is scheduled onto a kwok
// node and runs.
func TestSpokePodWithoutTolerationSchedules(t *testing.T) {
	spoke := fleet.Spokes[0]
	ctx, c, g := context.Background(), spoke.Client, NewWithT(t)
	addReadyNodes(t, spoke, cpuNodes(spoke, "plain")...)
	g.Expect(spoke.EnsureNamespace(ctx, "plain")).To(Succeed())
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "no-toleration", Namespace: "plain",
			Annotations: map[string]string{"kwok.trainyard.dev/run-for": "1h"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "registry.example/app:latest"}}},
	}
	g.Expect(c.Create(ctx, pod)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(spoke.CheckAlive()).To(Succeed())
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning))
	}, util.Timeout, util.Interval).Should(Succeed())
	g.Expect(pod.Spec.Tolerations).NotTo(ContainElement(HaveField("Key", kube.KwokTaint.Key)))
	var node corev1.Node
	g.Expect(c.Get(ctx, client.ObjectKey{Name: pod.Spec.NodeName}, &node)).To(Succeed())
	g.Expect(node.Labels).To(HaveKeyWithValue("type", "kwok"))
}

// TestSpokeBindsClaims: the spoke's default StorageClass is served by a
// provisioner; a pod's own claim and a JobSet's volumeClaimPolicies claim
// (the shape of Trainer's initializer runtimes) are provisioned, bound by
// the PV controller and used by pods that run and finish on kwok nodes
// with no toleration. Deleting the JobSet releases its volume, and the
// provisioner removes the volume's folder.
func TestSpokeBindsClaims(t *testing.T) {
	spoke := fleet.Spokes[0]
	ctx, c, g := context.Background(), spoke.Client, NewWithT(t)
	addReadyNodes(t, spoke, cpuNodes(spoke, "disk")...)
	const ns = "storage"
	g.Expect(spoke.EnsureNamespace(ctx, ns)).To(Succeed())

	var sc storagev1.StorageClass
	g.Expect(c.Get(ctx, client.ObjectKey{Name: kube.StorageClassName}, &sc)).To(Succeed())
	g.Expect(sc.Annotations).To(HaveKeyWithValue("storageclass.kubernetes.io/is-default-class", "true"))

	// A claim naming no class, and a pod using it.
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	g.Expect(c.Create(ctx, pvc)).To(Succeed())
	g.Expect(pvc.Spec.StorageClassName).To(HaveValue(Equal(kube.StorageClassName)), "the default class was not filled in")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "uses-data", Namespace: ns,
			Annotations: map[string]string{"kwok.trainyard.dev/run-for": "1h"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "main", Image: "registry.example/app:latest",
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}},
		},
	}
	g.Expect(c.Create(ctx, pod)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(spoke.CheckAlive()).To(Succeed())
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(pvc), pvc)).To(Succeed())
		g.Expect(pvc.Status.Phase).To(Equal(corev1.ClaimBound))
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning))
	}, util.Timeout, util.Interval).Should(Succeed())
	expectProvisioned(g, c, pvc)
	// WaitForFirstConsumer: the scheduler chose the pod's kwok node before
	// the volume was made.
	g.Expect(pvc.Annotations).To(HaveKeyWithValue("volume.kubernetes.io/selected-node", pod.Spec.NodeName))

	// A JobSet whose replicated jobs share a claim from volumeClaimPolicies:
	// an initializer writes, then the trainer nodes read.
	js := sharedVolumeJobSet("tune", ns)
	createAndComplete(t, spoke, js)
	shared := &corev1.PersistentVolumeClaim{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "initializer-tune"}, shared)).To(Succeed())
	g.Expect(shared.Status.Phase).To(Equal(corev1.ClaimBound))
	pv := expectProvisioned(g, c, shared)

	var pods corev1.PodList
	g.Expect(c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{jobset.JobSetNameKey: js.Name})).To(Succeed())
	g.Expect(pods.Items).To(HaveLen(3))
	for _, p := range pods.Items {
		g.Expect(p.Status.Phase).To(Equal(corev1.PodSucceeded), "pod %s", p.Name)
		g.Expect(p.Spec.Tolerations).NotTo(ContainElement(HaveField("Key", kube.KwokTaint.Key)), "pod %s", p.Name)
		g.Expect(p.Spec.Volumes).To(ContainElement(HaveField("PersistentVolumeClaim.ClaimName", shared.Name)), "pod %s", p.Name)
		var node corev1.Node
		g.Expect(c.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, &node)).To(Succeed(), "pod %s", p.Name)
		g.Expect(node.Labels).To(HaveKeyWithValue("type", "kwok"), "pod %s", p.Name)
	}

	// The JobSet's claim goes with it (retention Delete); the class's
	// reclaim policy Delete makes the provisioner remove the volume.
	g.Expect(c.Delete(ctx, js, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := c.Get(ctx, client.ObjectKeyFromObject(pv), pv)
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "PV %s still there (%v), phase %s", pv.Name, err, pv.Status.Phase)
		_, err = os.Stat(pv.Spec.HostPath.Path)
		g.Expect(os.IsNotExist(err)).To(BeTrue(), "folder %s still there (%v)", pv.Spec.HostPath.Path, err)
	}, util.Timeout, util.Interval).Should(Succeed())
}

// expectProvisioned checks that the claim's volume was made by the
// harness's provisioner as a hostPath folder that exists, and returns it.
func expectProvisioned(g Gomega, c client.Client, pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
	g.Expect(pvc.Spec.VolumeName).NotTo(BeEmpty())
	pv := &corev1.PersistentVolume{}
	g.Expect(c.Get(context.Background(), client.ObjectKey{Name: pvc.Spec.VolumeName}, pv)).To(Succeed())
	g.Expect(pv.Annotations).To(HaveKeyWithValue("pv.kubernetes.io/provisioned-by", kube.HostPathProvisioner))
	g.Expect(pv.Spec.ClaimRef).NotTo(BeNil())
	g.Expect(pv.Spec.ClaimRef.UID).To(Equal(pvc.UID))
	g.Expect(pv.Status.Phase).To(Equal(corev1.VolumeBound))
	g.Expect(pv.Spec.HostPath).NotTo(BeNil())
	g.Expect(pv.Spec.HostPath.Path).To(BeADirectory())
	return pv
}

// sharedVolumeJobSet is a JobSet in the shape of Trainer's torchtune
// runtimes: a claim template in volumeClaimPolicies, an initializer job and
// a 2-pod node job that starts when the initializer completes, both
// mounting the claim. No pod tolerates or selects anything.
func sharedVolumeJobSet(name, ns string) *jobset.JobSet {
	job := func(pods int32) batchv1.JobTemplateSpec {
		return batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
			Parallelism: ptrTo(pods), Completions: ptrTo(pods), BackoffLimit: ptrTo(int32(0)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"kwok.trainyard.dev/run-for": "1s"}},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{
						Name: "main", Image: "registry.example/trainer:latest",
						VolumeMounts: []corev1.VolumeMount{{Name: "initializer", MountPath: "/workspace"}},
					}},
				},
			},
		}}
	}
	return &jobset.JobSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: jobset.JobSetSpec{
			VolumeClaimPolicies: []jobset.VolumeClaimPolicy{{Templates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "initializer"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("20Gi")}},
				},
			}}}},
			ReplicatedJobs: []jobset.ReplicatedJob{
				{Name: "initializer", Replicas: 1, Template: job(1)},
				{Name: "node", Replicas: 1, Template: job(2),
					DependsOn: []jobset.DependsOn{{Name: "initializer", Status: jobset.DependencyComplete}}},
			},
		},
	}
}

package fleet

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobset "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/test/util"
)

// TestSpokeRunsJobSetOnKwokGPUNodes: on every spoke a 2-replica JobSet,
// each replica asking for 4 GPUs, is scheduled onto simulated GPU nodes,
// runs there and completes.
func TestSpokeRunsJobSetOnKwokGPUNodes(t *testing.T) {
	for _, spoke := range fleet.Spokes {
		t.Run(spoke.Name, func(t *testing.T) {
			t.Parallel()
			runJobSet(t, spoke)
		})
	}
}

func runJobSet(t *testing.T, spoke *kube.Cluster) {
	ctx, c := context.Background(), spoke.Client
	g := NewWithT(t)
	nodes := []kube.NodeSpec{
		{Name: spoke.Name + "-gpu-0", GPUs: 4, Labels: map[string]string{"topology.kubernetes.io/rack": "r1"}},
		{Name: spoke.Name + "-gpu-1", GPUs: 4, Labels: map[string]string{"topology.kubernetes.io/rack": "r1"}},
	}
	addReadyNodes(t, spoke, nodes...)

	g.Expect(spoke.EnsureNamespace(ctx, "jobs")).To(Succeed())
	js := gpuJobSet("train", "jobs", 2, 4)
	createAndComplete(t, spoke, js)

	var pods corev1.PodList
	g.Expect(c.List(ctx, &pods, client.InNamespace("jobs"), client.MatchingLabels{jobset.JobSetNameKey: "train"})).To(Succeed())
	g.Expect(pods.Items).To(HaveLen(2))
	onNodes := map[string]bool{}
	for _, p := range pods.Items {
		g.Expect(p.Status.Phase).To(Equal(corev1.PodSucceeded), "pod %s", p.Name)
		onNodes[p.Spec.NodeName] = true
	}
	// 4 GPUs each on 4-GPU nodes: the scheduler had to use both nodes.
	g.Expect(onNodes).To(Equal(map[string]bool{nodes[0].Name: true, nodes[1].Name: true}))
}

// createAndComplete creates js on spoke and waits until it is Completed,
// failing at once if a spoke component has exited.
func createAndComplete(t *testing.T, spoke *kube.Cluster, js *jobset.JobSet) {
	t.Helper()
	ctx, c, g := context.Background(), spoke.Client, NewWithT(t)
	g.Expect(c.Create(ctx, js)).To(Succeed())
	g.Eventually(func() error {
		if err := spoke.CheckAlive(); err != nil {
			return StopTrying(err.Error())
		}
		return util.ConditionTrue(ctx, c, js, func() []metav1.Condition { return js.Status.Conditions }, string(jobset.JobSetCompleted))
	}, util.Timeout, util.Interval).Should(Succeed())
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func gpuJobSet(name, ns string, replicas int32, gpus int64) *jobset.JobSet {
	q := *resource.NewQuantity(gpus, resource.DecimalSI)
	return &jobset.JobSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: jobset.JobSetSpec{ReplicatedJobs: []jobset.ReplicatedJob{{
			Name:     "workers",
			Replicas: replicas,
			Template: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
				Parallelism: ptrTo(int32(1)), Completions: ptrTo(int32(1)), BackoffLimit: ptrTo(int32(0)),
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"kwok.trainyard.dev/run-for": "2s"}},
					Spec: corev1.PodSpec{
						RestartPolicy: corev1.RestartPolicyNever,
						NodeSelector:  map[string]string{"type": "kwok"},
						Containers: []corev1.Container{{
							Name: "trainer", Image: "registry.example/trainer:latest",
							Resources: corev1.ResourceRequirements{
								Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), kube.GPUResource: q},
								Limits:   corev1.ResourceList{kube.GPUResource: q},
							},
						}},
					},
				},
			}},
		}}},
	}
}

func ptrTo[T any](v T) *T { return &v }

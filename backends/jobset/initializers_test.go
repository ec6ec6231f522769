package jobset

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// initJob is what a test checks of one rendered replicated job.
type initJob struct {
	Name           string
	Replicas, Pods int32
	DependsOn      []jobsetv1alpha2.DependsOn
	// Env is the first container's env by name, Mounts its volume mounts
	// by name.
	Env            map[string]string
	Mounts         map[string]string
	ServiceAccount string
}

func initJobs(js *jobsetv1alpha2.JobSet) []initJob {
	var out []initJob
	for _, rj := range js.Spec.ReplicatedJobs {
		pod := rj.Template.Spec.Template.Spec
		j := initJob{Name: rj.Name, Replicas: rj.Replicas, Pods: ptr.Deref(rj.Template.Spec.Parallelism, 0),
			DependsOn: rj.DependsOn, ServiceAccount: pod.ServiceAccountName}
		c := pod.Containers[0]
		for _, e := range c.Env {
			if e.ValueFrom == nil && !strings.HasPrefix(e.Name, "PET_") {
				if j.Env == nil {
					j.Env = map[string]string{}
				}
				j.Env[e.Name] = e.Value
			}
		}
		if len(c.VolumeMounts) > 0 {
			j.Mounts = mounts(c)
		}
		out = append(out, j)
	}
	return out
}

// TestRenderInitializersShipped: Trainer's runtimes with dataset and model
// initializers, as shipped, render their initializer jobs before the
// trainer's (dependsOn) and keep the JobSet's volume claim templates.
func TestRenderInitializersShipped(t *testing.T) {
	complete := func(names ...string) []jobsetv1alpha2.DependsOn {
		var out []jobsetv1alpha2.DependsOn
		for _, n := range names {
			out = append(out, jobsetv1alpha2.DependsOn{Name: n, Status: jobsetv1alpha2.DependencyComplete})
		}
		return out
	}
	workspace := map[string]string{"initializer": "/workspace"}
	cases := map[string]struct {
		runtime     string
		initializer *trainer.Initializer
		podSets     []v1alpha1.PodSetPlacement
		want        []initJob
		wantClaims  []jobsetv1alpha2.VolumeClaimPolicy
	}{
		"torchtune llama3.2 1B, dataset from the TrainJob": {
			runtime:     tytesting.TrainerTorchtuneLlama1B,
			initializer: &trainer.Initializer{Dataset: &trainer.DatasetInitializer{StorageUri: ptr.To("hf://team-a/data")}},
			podSets: []v1alpha1.PodSetPlacement{
				{Name: "dataset-initializer", Count: 1}, {Name: "model-initializer", Count: 1}, {Name: "node", Count: 1}},
			want: []initJob{
				{Name: "dataset-initializer", Replicas: 1, Pods: 1, Env: map[string]string{"STORAGE_URI": "hf://team-a/data"}, Mounts: workspace},
				{Name: "model-initializer", Replicas: 1, Pods: 1, Env: map[string]string{"STORAGE_URI": "hf://meta-llama/Llama-3.2-1B-Instruct"}, Mounts: workspace},
				{Name: "node", Replicas: 1, Pods: 1, DependsOn: complete("dataset-initializer", "model-initializer"), Mounts: workspace},
			},
			wantClaims: []jobsetv1alpha2.VolumeClaimPolicy{{Templates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "initializer"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("20Gi")}},
				},
			}}}},
		},
		"torch with data cache": {
			runtime: tytesting.TrainerTorchWithCache,
			podSets: []v1alpha1.PodSetPlacement{{Name: "dataset-initializer", Count: 1}, {Name: "node", Count: 1}},
			want: []initJob{
				{Name: "dataset-initializer", Replicas: 1, Pods: 1, ServiceAccount: "kubeflow-trainer-cache-initializer",
					Env: map[string]string{"CACHE_IMAGE": "ghcr.io/kubeflow/trainer/data-cache:v2.3.0"}},
				{Name: "node", Replicas: 1, Pods: 1, DependsOn: complete("dataset-initializer")},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rt, err := tytesting.ShippedRuntime(tc.runtime)
			if err != nil {
				t.Fatal(err)
			}
			tj := tytesting.MakeTrainJob("tune", "team-a").RuntimeRef(trainer.ClusterTrainingRuntimeKind, rt.Name).Obj()
			tj.Spec.Initializer = tc.initializer
			d := shippedDispatch(t, tc.runtime, tj, tc.podSets...)
			js := mustRender(t, d)
			if diff := cmp.Diff(tc.want, initJobs(js)); diff != "" {
				t.Errorf("replicated jobs (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantClaims, js.Spec.VolumeClaimPolicies); diff != "" {
				t.Errorf("volume claim policies (-want +got):\n%s", diff)
			}
		})
	}
}

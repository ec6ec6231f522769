package convert

import (
	"maps"
	"testing"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	kueueconstants "sigs.k8s.io/kueue/pkg/controller/constants"
)

const mpiJobV2beta1 = `
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: pi, namespace: team-a}
spec:
  slotsPerWorker: 4
  mpiImplementation: OpenMPI
  launcherCreationPolicy: WaitForWorkersReady
  runPolicy: {activeDeadlineSeconds: 600, suspend: true}
  mpiReplicaSpecs:
    Launcher:
      template:
        spec:
          containers:
          - name: launcher
            image: pi:1
            command: [mpirun]
            args: [-n, "8", /pi]
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - name: worker
            image: pi:1
            resources: {limits: {nvidia.com/gpu: 4}}
`

const mpiJobLauncherAsWorker = `
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: pi, labels: {kueue.x-k8s.io/queue-name: lq}}
spec:
  runLauncherAsWorker: true
  mpiReplicaSpecs:
    Launcher:
      template: {spec: {containers: [{name: launcher, image: pi:1, command: [mpirun, /pi]}]}}
    Worker:
      replicas: 2
      template: {spec: {containers: [{name: worker, image: pi:1}]}}
`

const mpiJobLauncherOnly = `
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: pi, labels: {kueue.x-k8s.io/queue-name: lq}}
spec:
  runLauncherAsWorker: true
  mpiReplicaSpecs:
    Launcher:
      template: {spec: {containers: [{name: launcher, image: pi:1, command: [mpirun, /pi], resources: {limits: {cpu: 2}}}]}}
`

const pytorchJobElastic = `
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: echo, labels: {kueue.x-k8s.io/queue-name: lq}}
spec:
  elasticPolicy:
    rdzvBackend: c10d
    rdzvPort: 29400
    minReplicas: 1
    maxReplicas: 4
    nProcPerNode: 8
  pytorchReplicaSpecs:
    Worker:
      replicas: 3
      template:
        spec:
          containers:
          - name: pytorch
            image: echo:1
            command: [torchrun, echo.py]
`

const pytorchJobBothNprocs = `
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: echo, labels: {kueue.x-k8s.io/queue-name: lq}}
spec:
  nprocPerNode: "2"
  elasticPolicy: {nProcPerNode: 8}
  pytorchReplicaSpecs:
    Worker:
      template: {spec: {containers: [{name: pytorch, image: echo:1}]}}
`

// TestConvertShapes covers the shapes users have besides Training Operator's
// Master and Worker: mpi-operator's MPIJobs, elastic and Worker-only
// PyTorchJobs, and the job's place (namespace, queue, runtime) set by flags
// or by the runtime picked. TestConvert checks how TrainJobs print.
func TestConvertShapes(t *testing.T) {
	trainingRuntimeIn := func(ns string) func(MLPolicy, string) (trainer.RuntimeRef, string, error) {
		return func(MLPolicy, string) (trainer.RuntimeRef, string, error) {
			return ref(trainer.TrainingRuntimeKind, "team-mpi"), ns, nil
		}
	}
	deepspeed := ref(trainer.ClusterTrainingRuntimeKind, "deepspeed-distributed")
	queued := map[string]string{kueueconstants.QueueLabel: "lq"}
	gpus := func(n string) *corev1.ResourceRequirements {
		return &corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(n)}}
	}
	launcherAsWorker := "MPIJob/pi: spec.runLauncherAsWorker: numNodes 3 counts the Launcher, so use a runtime with mlPolicy.mpi.runLauncherAsNode"
	cases := map[string]struct {
		input     string
		opts      Options
		namespace string
		spec      trainer.TrainJobSpec
		warnings  []string
	}{
		"v2beta1 MPIJob: slots, launcher command, worker resources, run policy": {
			input: mpiJobV2beta1,
			opts:  Options{Queue: "lq", Namespace: "team-b"}, namespace: "team-b",
			spec: trainer.TrainJobSpec{
				RuntimeRef: deepspeed, ActiveDeadlineSeconds: 600, Suspend: ptr.To(true),
				Trainer: &trainer.Trainer{
					Image: ptr.To("pi:1"), Command: []string{"mpirun"}, Args: []string{"-n", "8", "/pi"},
					NumNodes: ptr.To[int32](2), NumProcPerNode: ptr.To[int32](4), ResourcesPerNode: gpus("4"),
				},
			},
			warnings: []string{
				"MPIJob/pi: spec.launcherCreationPolicy is not carried over: the runtime decides when the launcher starts (dependsOn)",
			},
		},
		"v2beta1 MPIJob: a launcher that runs as a worker counts as a node": {
			input: mpiJobLauncherAsWorker,
			spec: trainer.TrainJobSpec{RuntimeRef: deepspeed, Trainer: &trainer.Trainer{
				Image: ptr.To("pi:1"), Command: []string{"mpirun", "/pi"}, NumNodes: ptr.To[int32](3),
			}},
			warnings: []string{launcherAsWorker},
		},
		"v2beta1 MPIJob: a launcher alone, as a worker, is one node": {
			input: mpiJobLauncherOnly,
			opts:  Options{Runtime: "mpi-single"},
			spec: trainer.TrainJobSpec{RuntimeRef: ref(trainer.ClusterTrainingRuntimeKind, "mpi-single"), Trainer: &trainer.Trainer{
				Image: ptr.To("pi:1"), Command: []string{"mpirun", "/pi"}, NumNodes: ptr.To[int32](1),
				ResourcesPerNode: &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}},
			}},
			warnings: []string{
				"MPIJob/pi: spec.runLauncherAsWorker: numNodes 1 counts the Launcher, so use a runtime with mlPolicy.mpi.runLauncherAsNode",
			},
		},
		"elastic Worker-only PyTorchJob: fixed numNodes, nProcPerNode carried": {
			input: pytorchJobElastic,
			spec: trainer.TrainJobSpec{RuntimeRef: ref(trainer.ClusterTrainingRuntimeKind, "torch-distributed"), Trainer: &trainer.Trainer{
				Image: ptr.To("echo:1"), Command: []string{"torchrun", "echo.py"}, NumNodes: ptr.To[int32](3), NumProcPerNode: ptr.To[int32](8),
			}},
			warnings: []string{
				"PyTorchJob/echo: spec.elasticPolicy.maxReplicas is not carried over: a TrainJob runs a fixed numNodes",
				"PyTorchJob/echo: spec.elasticPolicy.minReplicas is not carried over: a TrainJob runs a fixed numNodes",
				"PyTorchJob/echo: spec.elasticPolicy.rdzvBackend is not carried over: the runtime's torch policy sets up the rendezvous",
				"PyTorchJob/echo: spec.elasticPolicy.rdzvPort is not carried over: the runtime's torch policy sets up the rendezvous",
			},
		},
		"PyTorchJob: spec.nprocPerNode wins over the elastic one": {
			input: pytorchJobBothNprocs,
			spec: trainer.TrainJobSpec{RuntimeRef: ref(trainer.ClusterTrainingRuntimeKind, "torch-distributed"), Trainer: &trainer.Trainer{
				Image: ptr.To("echo:1"), NumNodes: ptr.To[int32](1), NumProcPerNode: ptr.To[int32](2),
			}},
			warnings: []string{"PyTorchJob/echo: spec.elasticPolicy.nProcPerNode is not carried over: spec.nprocPerNode 2 takes its place"},
		},
		"a TrainingRuntime picked in the default namespace puts the job there": {
			input: mpiJobLauncherAsWorker,
			opts:  Options{PickRuntime: trainingRuntimeIn("team-c")}, namespace: "team-c",
			spec: trainer.TrainJobSpec{RuntimeRef: ref(trainer.TrainingRuntimeKind, "team-mpi"), Trainer: &trainer.Trainer{
				Image: ptr.To("pi:1"), Command: []string{"mpirun", "/pi"}, NumNodes: ptr.To[int32](3),
			}},
			warnings: []string{launcherAsWorker},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if tc.opts.Runtime == "" && tc.opts.PickRuntime == nil {
				tc.opts.PickRuntime = pickShipped
			}
			tj, warnings, err := ToTrainJob(doc(t, tc.input), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if tj.Namespace != tc.namespace || !maps.Equal(tj.Labels, queued) {
				t.Errorf("namespace %q, labels %v; want %q, %v", tj.Namespace, tj.Labels, tc.namespace, queued)
			}
			if diff := cmp.Diff(tc.spec, tj.Spec, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
				t.Errorf("spec (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.warnings, warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

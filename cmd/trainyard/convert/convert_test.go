package convert

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"sigs.k8s.io/yaml"
)

// doc is one YAML document for ToTrainJob.
func doc(t *testing.T, yamlText string) []byte {
	t.Helper()
	docs, err := SplitDocuments([]byte(yamlText))
	if err != nil || len(docs) != 1 {
		t.Fatalf("splitDocuments: %d docs, %v", len(docs), err)
	}
	return docs[0]
}

// convertedYAML is tj as `trainyard convert` prints it.
func convertedYAML(t *testing.T, tj *trainer.TrainJob) string {
	t.Helper()
	m, err := Manifest(tj)
	if err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// lines joins YAML lines; tests spell manifests out one line each.
func lines(l ...string) string { return strings.Join(l, "\n") + "\n" }

const pytorchJob = `
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: mnist
  namespace: team-a
  labels:
    kueue.x-k8s.io/queue-name: lq
spec:
  nprocPerNode: "4"
  runPolicy:
    activeDeadlineSeconds: 3600
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          containers:
          - name: pytorch
            image: pytorch/pytorch:2.7.1
            command: [torchrun, mnist.py]
            args: [--epochs, "2"]
            env: [{name: NCCL_DEBUG, value: INFO}]
            resources: {limits: {nvidia.com/gpu: 4}}
    Worker:
      replicas: 3
      template:
        spec:
          containers:
          - name: pytorch
            image: pytorch/pytorch:2.7.1
            command: [torchrun, mnist.py]
            args: [--epochs, "2"]
            env: [{name: NCCL_DEBUG, value: INFO}]
            resources: {limits: {nvidia.com/gpu: 4}}
`

const pytorchJobWithExtras = `
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: big
  uid: 0b7e
  resourceVersion: "12"
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: "{}"
    team: vision
spec:
  nprocPerNode: auto
  elasticPolicy: {minReplicas: 1, maxReplicas: 4}
  runPolicy: {cleanPodPolicy: None, backoffLimit: 3}
  pytorchReplicaSpecs:
    Master:
      restartPolicy: OnFailure
      template:
        spec:
          containers:
          - name: pytorch
            image: pytorch/pytorch:2.7.1
            command: [torchrun, --master, train.py]
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        metadata:
          creationTimestamp: null
          annotations: {sidecar.istio.io/inject: "false"}
        spec:
          nodeSelector: {gpu: h100}
          volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
          containers:
          - name: pytorch
            image: pytorch/pytorch:2.7.1
            command: [torchrun, train.py]
            ports: [{name: pytorchjob-port, containerPort: 23456}]
            volumeMounts: [{name: data, mountPath: /data}]
          - name: logger
            image: busybox
            volumeMounts: [{name: data, mountPath: /data}]
status:
  conditions: [{type: Created, status: "True"}]
`

const mpiJob = `
apiVersion: kubeflow.org/v1
kind: MPIJob
metadata:
  name: horovod
  labels: {kueue.x-k8s.io/queue-name: lq}
spec:
  slotsPerWorker: 2
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        spec:
          containers:
          - name: mpi
            image: horovod:0.28
            command: [mpirun]
            args: [-np, "4", python, train.py]
            env: [{name: A, value: "1"}]
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - name: mpi
            image: horovod:0.28
            env: [{name: B, value: "2"}]
            resources: {limits: {nvidia.com/gpu: 2}}
`

const mpiJobWithExtras = `
apiVersion: kubeflow.org/v1
kind: MPIJob
metadata:
  name: odd
  labels: {kueue.x-k8s.io/queue-name: lq}
spec:
  mainContainer: trainer
  cleanPodPolicy: Running
  mpiReplicaSpecs:
    Launcher:
      replicas: 2
      template:
        spec:
          containers:
          - name: trainer
            image: launcher:1
            command: [mpirun, python, train.py]
            env: [{name: A, value: "1"}]
            resources: {limits: {cpu: 1}}
    Worker:
      replicas: 4
      template:
        spec:
          containers:
          - name: trainer
            image: worker:1
            command: [/usr/sbin/sshd, -De]
            env: [{name: A, value: "2"}]
            resources: {limits: {nvidia.com/gpu: 8}}
    Evaluator:
      template: {spec: {containers: [{name: x, image: "y"}]}}
`

func TestConvert(t *testing.T) {
	cases := map[string]struct {
		input    string
		opts     Options
		want     string
		warnings []string
	}{
		"PyTorchJob: master and workers make numNodes": {
			input: pytorchJob,
			want: lines(
				"apiVersion: trainer.kubeflow.org/v1alpha1",
				"kind: TrainJob",
				"metadata:",
				"  labels:",
				"    kueue.x-k8s.io/queue-name: lq",
				"  name: mnist",
				"  namespace: team-a",
				"spec:",
				"  activeDeadlineSeconds: 3600",
				"  runtimeRef:",
				"    apiGroup: trainer.kubeflow.org",
				"    kind: ClusterTrainingRuntime",
				"    name: torch-distributed",
				"  trainer:",
				"    args:",
				"    - --epochs",
				`    - "2"`,
				"    command:",
				"    - torchrun",
				"    - mnist.py",
				"    env:",
				"    - name: NCCL_DEBUG",
				"      value: INFO",
				"    image: pytorch/pytorch:2.7.1",
				"    numNodes: 4",
				"    numProcPerNode: 4",
				"    resourcesPerNode:",
				"      limits:",
				`        nvidia.com/gpu: "4"`,
			),
		},
		"PyTorchJob: runtime chosen by flags": {
			input: pytorchJob,
			opts:  Options{Runtime: "torch-pinned", RuntimeKind: trainer.TrainingRuntimeKind},
			want: lines(
				"apiVersion: trainer.kubeflow.org/v1alpha1",
				"kind: TrainJob",
				"metadata:",
				"  labels:",
				"    kueue.x-k8s.io/queue-name: lq",
				"  name: mnist",
				"  namespace: team-a",
				"spec:",
				"  activeDeadlineSeconds: 3600",
				"  runtimeRef:",
				"    apiGroup: trainer.kubeflow.org",
				"    kind: TrainingRuntime",
				"    name: torch-pinned",
				"  trainer:",
				"    args:",
				"    - --epochs",
				`    - "2"`,
				"    command:",
				"    - torchrun",
				"    - mnist.py",
				"    env:",
				"    - name: NCCL_DEBUG",
				"      value: INFO",
				"    image: pytorch/pytorch:2.7.1",
				"    numNodes: 4",
				"    numProcPerNode: 4",
				"    resourcesPerNode:",
				"      limits:",
				`        nvidia.com/gpu: "4"`,
			),
		},
		"PyTorchJob: everything a TrainJob cannot carry is named": {
			input: pytorchJobWithExtras,
			want: lines(
				"apiVersion: trainer.kubeflow.org/v1alpha1",
				"kind: TrainJob",
				"metadata:",
				"  annotations:",
				"    team: vision",
				"  name: big",
				"spec:",
				"  runtimeRef:",
				"    apiGroup: trainer.kubeflow.org",
				"    kind: ClusterTrainingRuntime",
				"    name: torch-distributed",
				"  trainer:",
				"    command:",
				"    - torchrun",
				"    - train.py",
				"    image: pytorch/pytorch:2.7.1",
				"    numNodes: 3",
			),
			warnings: []string{
				"PyTorchJob/big: no kueue.x-k8s.io/queue-name label (pass --queue): Kueue will not queue the TrainJob, so trainyard will not dispatch it",
				"PyTorchJob/big: spec.pytorchReplicaSpecs.Worker.template.spec.containers[logger] is not carried over: a TrainJob runs one training container per node (add sidecars to the runtime)",
				"PyTorchJob/big: spec.pytorchReplicaSpecs.Master.restartPolicy OnFailure is not carried over: restarts follow the runtime's failurePolicy",
				"PyTorchJob/big: spec.pytorchReplicaSpecs.Worker.restartPolicy OnFailure is not carried over: restarts follow the runtime's failurePolicy",
				"PyTorchJob/big: the Master's training container differs from the Worker's in command, which is not carried over: every node runs the Worker's container",
				`PyTorchJob/big: spec.nprocPerNode "auto" is not carried over: numProcPerNode takes a number, and the runtime's default applies`,
				"PyTorchJob/big: spec.elasticPolicy.maxReplicas is not carried over: a TrainJob runs a fixed numNodes",
				"PyTorchJob/big: spec.elasticPolicy.minReplicas is not carried over: a TrainJob runs a fixed numNodes",
				"PyTorchJob/big: spec.pytorchReplicaSpecs.Worker.template.metadata is not carried over: set it in the runtime",
				"PyTorchJob/big: spec.pytorchReplicaSpecs.Worker.template.spec.containers[pytorch].ports is not carried over: the runtime sets the ports",
				"PyTorchJob/big: spec.pytorchReplicaSpecs.Worker.template.spec.containers[pytorch].volumeMounts is not carried over: mount volumes through the runtime's pod template",
				"PyTorchJob/big: spec.pytorchReplicaSpecs.Worker.template.spec.nodeSelector is not carried over: set it in the runtime",
				"PyTorchJob/big: spec.pytorchReplicaSpecs.Worker.template.spec.volumes is not carried over: mount volumes through the runtime's pod template",
				"PyTorchJob/big: spec.runPolicy.backoffLimit is not carried over: set failurePolicy.maxRestarts in the runtime",
				"PyTorchJob/big: spec.runPolicy.cleanPodPolicy is not carried over: the runtime and trainyard decide when pods go",
				"PyTorchJob/big: metadata.resourceVersion, metadata.uid, status, metadata.annotations.kubectl.kubernetes.io/last-applied-configuration are not carried over (written by the API server or kubectl)",
			},
		},
		"MPIJob: launcher command, worker resources and count": {
			input: mpiJob,
			want: lines(
				"apiVersion: trainer.kubeflow.org/v1alpha1",
				"kind: TrainJob",
				"metadata:",
				"  labels:",
				"    kueue.x-k8s.io/queue-name: lq",
				"  name: horovod",
				"spec:",
				"  runtimeRef:",
				"    apiGroup: trainer.kubeflow.org",
				"    kind: ClusterTrainingRuntime",
				"    name: deepspeed-distributed",
				"  trainer:",
				"    args:",
				"    - -np",
				`    - "4"`,
				"    - python",
				"    - train.py",
				"    command:",
				"    - mpirun",
				"    env:",
				"    - name: B",
				`      value: "2"`,
				"    - name: A",
				`      value: "1"`,
				"    image: horovod:0.28",
				"    numNodes: 2",
				"    numProcPerNode: 2",
				"    resourcesPerNode:",
				"      limits:",
				`        nvidia.com/gpu: "2"`,
			),
		},
		"MPIJob: what the launcher and workers cannot carry is named": {
			input: mpiJobWithExtras,
			want: lines(
				"apiVersion: trainer.kubeflow.org/v1alpha1",
				"kind: TrainJob",
				"metadata:",
				"  labels:",
				"    kueue.x-k8s.io/queue-name: lq",
				"  name: odd",
				"spec:",
				"  runtimeRef:",
				"    apiGroup: trainer.kubeflow.org",
				"    kind: ClusterTrainingRuntime",
				"    name: deepspeed-distributed",
				"  trainer:",
				"    command:",
				"    - mpirun",
				"    - python",
				"    - train.py",
				"    env:",
				"    - name: A",
				`      value: "2"`,
				"    image: worker:1",
				"    numNodes: 4",
				"    resourcesPerNode:",
				"      limits:",
				`        nvidia.com/gpu: "8"`,
			),
			warnings: []string{
				"MPIJob/odd: spec.mpiReplicaSpecs.Evaluator is not carried over: MPIJobs have only Launcher and Worker replicas",
				"MPIJob/odd: the Worker command and args are not carried over: the runtime starts the workers, and the trainer runs the Launcher's command",
				`MPIJob/odd: the Launcher image "launcher:1" is not carried over: every node runs the Worker image "worker:1"`,
				"MPIJob/odd: the Launcher resources are not carried over: resourcesPerNode comes from the Worker",
				"MPIJob/odd: env A differs between the Worker and the Launcher: the Worker's value is kept",
				"MPIJob/odd: spec.mpiReplicaSpecs.Launcher.replicas 2 is not carried over: the runtime runs one launcher",
				"MPIJob/odd: spec.cleanPodPolicy is not carried over: the runtime and trainyard decide when pods go",
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if tc.opts.Runtime == "" {
				tc.opts.PickRuntime = pickShipped
			}
			tj, warnings, err := ToTrainJob(doc(t, tc.input), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, convertedYAML(t, tj)); diff != "" {
				t.Errorf("TrainJob (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.warnings, warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConvertErrors(t *testing.T) {
	cases := map[string]struct {
		input string
		want  string
	}{
		"another API version": {
			input: "apiVersion: kubeflow.org/v2beta1\nkind: PyTorchJob\nmetadata: {name: a}\n",
			want:  "cannot convert kubeflow.org/v2beta1 PyTorchJob: want a kubeflow.org/v1 PyTorchJob, or a kubeflow.org/v1 or kubeflow.org/v2beta1 MPIJob",
		},
		"another kind": {
			input: "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: a}\n",
			want:  "cannot convert kubeflow.org/v1 TFJob: want a kubeflow.org/v1 PyTorchJob, or a kubeflow.org/v1 or kubeflow.org/v2beta1 MPIJob",
		},
		"PyTorchJob without replicas": {
			input: "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: a}\nspec: {}\n",
			want:  "PyTorchJob/a: spec.pytorchReplicaSpecs has neither Master nor Worker",
		},
		"MPIJob without workers": {
			input: "apiVersion: kubeflow.org/v1\nkind: MPIJob\nmetadata: {name: a}\nspec: {mpiReplicaSpecs: {Launcher: {template: {spec: {containers: [{name: mpi}]}}}}}\n",
			want:  "MPIJob/a: spec.mpiReplicaSpecs has no Worker replicas",
		},
		"no containers": {
			input: "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: a}\nspec: {pytorchReplicaSpecs: {Worker: {template: {spec: {containers: []}}}}}\n",
			want:  "PyTorchJob/a: spec.pytorchReplicaSpecs.Worker.template.spec.containers is empty",
		},
		"replicas of the wrong type": {
			input: "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: a}\nspec: {pytorchReplicaSpecs: {Worker: {replicas: two}}}\n",
			want:  "json: cannot unmarshal string into Go struct field v1ReplicaSpec.spec.pytorchReplicaSpecs.replicas of type int32",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, err := ToTrainJob(doc(t, tc.input), Options{PickRuntime: pickShipped})
			if err == nil || err.Error() != tc.want {
				t.Errorf("error = %v, want %q", err, tc.want)
			}
		})
	}
}

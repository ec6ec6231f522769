package convert

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"k8s.io/utils/ptr"
	kueueconstants "sigs.k8s.io/kueue/pkg/controller/constants"
	"sigs.k8s.io/yaml"

	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// exampleWant is what one shipped example converts to.
type exampleWant struct {
	runtime string
	nodes   int32
	procs   *int32
	image   string
	// cmd is the trainer's command, then its args.
	cmd []string
	// gpus and cpu are resourcesPerNode limits (cpu "" for none).
	gpus int64
	cpu  string
	// warn are warnings that must be among those printed (after "Kind/name: ").
	warn []string
}

const (
	torchRT = "torch-distributed"
	mpiRT   = "deepspeed-distributed"
)

var (
	mnistCmd   = []string{"python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1"}
	mpiOnPiCmd = []string{"mpirun", "-n", "2", "/home/mpiuser/pi"}
	horovodCmd = []string{"mpirun", "-np", "2", "--allow-run-as-root", "-bind-to", "none", "-map-by", "slot",
		"-x", "LD_LIBRARY_PATH", "-x", "PATH", "-mca", "pml", "ob1", "-mca", "btl", "^openib", "python"}
	restarts = []string{
		"spec.pytorchReplicaSpecs.Master.restartPolicy OnFailure is not carried over: restarts follow the runtime's failurePolicy",
		"spec.pytorchReplicaSpecs.Worker.restartPolicy OnFailure is not carried over: restarts follow the runtime's failurePolicy",
	}
	mpiV2 = []string{
		"spec.sshAuthMountPath is not carried over: set mlPolicy.mpi.sshAuthMountPath in the runtime",
		"the Worker command and args are not carried over: the runtime starts the workers, and the trainer runs the Launcher's command",
		"spec.mpiReplicaSpecs.Worker.template.spec.containers[mpi-worker].securityContext is not carried over: set it in the runtime",
	}
)

// shippedExamples are the PyTorchJobs and MPIJobs of Training Operator
// v1.9.3's examples/pytorch and examples/mpi and of mpi-operator v0.8.2's
// examples/v2beta1, by module/path#document.
var shippedExamples = map[string]exampleWant{
	"training-operator/examples/pytorch/cpu-demo/demo.yaml#1": {runtime: torchRT, nodes: 2, procs: ptr.To[int32](2), image: "pytorch-cpu:py3.8",
		cmd: []string{"torchrun", "demo.py"}, warn: restarts},
	"training-operator/examples/pytorch/deepspeed-demo/pytorch_deepspeed_demo.yaml#1": {runtime: torchRT, nodes: 2,
		image: "ghcr.io/kubeflow/training-v1/pytorch-deepspeed-demo:latest", gpus: 1,
		cmd: []string{"torchrun", "/train_bert_ds.py", "--checkpoint_dir", "/root/deepspeed_data"}, warn: restarts},
	"training-operator/examples/pytorch/elastic/echo/echo.yaml#1": {runtime: torchRT, nodes: 2,
		image: "ghcr.io/kubeflow/training-v1/pytorch-elastic-example-echo:latest",
		cmd:   []string{"python", "-m", "torch.distributed.run", "--rdzv_backend=c10d", "./echo.py"},
		warn: []string{
			"spec.elasticPolicy.minReplicas is not carried over: a TrainJob runs a fixed numNodes",
			"spec.elasticPolicy.maxReplicas is not carried over: a TrainJob runs a fixed numNodes",
			"spec.elasticPolicy.rdzvBackend is not carried over: the runtime's torch policy sets up the rendezvous",
			"spec.elasticPolicy.maxRestarts is not carried over: set failurePolicy.maxRestarts in the runtime",
		}},
	"training-operator/examples/pytorch/elastic/imagenet/imagenet.yaml#1": {runtime: torchRT, nodes: 2,
		image: "ghcr.io/kubeflow/training-v1/pytorch-elastic-example-imagenet:latest",
		cmd: []string{"python", "-m", "torch.distributed.run", "/workspace/examples/imagenet.py", "--arch=resnet18", "--epochs=1",
			"--batch-size=32", "--workers=0", "/workspace/data/tiny-imagenet-200"},
		warn: []string{"spec.elasticPolicy.metrics is not carried over: TrainJobs are not autoscaled"}},
	"training-operator/examples/pytorch/mnist/v1/pytorch_job_mnist_gloo.yaml#1": {runtime: torchRT, nodes: 2,
		image: "ghcr.io/kubeflow/training-v1/pytorch-dist-mnist:latest", gpus: 1, cmd: []string{"--backend", "gloo"}},
	"training-operator/examples/pytorch/mnist/v1/pytorch_job_mnist_mpi.yaml#1": {runtime: torchRT, nodes: 2,
		image: "ghcr.io/kubeflow/training-v1/pytorch-dist-mnist:latest", gpus: 1, cmd: []string{"--backend", "mpi"}},
	"training-operator/examples/pytorch/mnist/v1/pytorch_job_mnist_nccl.yaml#1": {runtime: torchRT, nodes: 2,
		image: "ghcr.io/kubeflow/training-v1/pytorch-dist-mnist:latest", gpus: 1, cmd: []string{"--backend", "nccl"}},
	"training-operator/examples/pytorch/simple.yaml#1": {runtime: torchRT, nodes: 2,
		image: "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727", cmd: mnistCmd,
		warn: []string{"spec.pytorchReplicaSpecs.Worker.template.spec.containers[pytorch].imagePullPolicy is not carried over: set it in the runtime"}},
	"training-operator/examples/pytorch/smoke-dist/pytorch_job_sendrecv.yaml#1": {runtime: torchRT, nodes: 4,
		image: "ghcr.io/kubeflow/training-v1/pytorch-dist-sendrecv-test:latest"},
	"training-operator/examples/mpi/tensorflow-mnist.yaml#1": {runtime: mpiRT, nodes: 2, procs: ptr.To[int32](1),
		image: "horovod/horovod:0.28.1", cpu: "2", cmd: append(slices.Clone(horovodCmd), "/horovod/examples/tensorflow2/tensorflow2_mnist.py"),
		warn: []string{"the Launcher resources are not carried over: resourcesPerNode comes from the Worker"}},
	"training-operator/examples/mpi/tensorflow-mnist-elastic.yaml#1": {runtime: mpiRT, nodes: 2, procs: ptr.To[int32](1),
		image: "horovod/horovod:0.20.0-tf2.3.0-torch1.6.0-mxnet1.5.0-py3.7-cpu", cpu: "2",
		cmd: []string{"horovodrun", "-np", "2", "--min-np", "1", "--max-np", "3", "--host-discovery-script", "/etc/mpi/discover_hosts.sh",
			"python", "/examples/elastic/tensorflow2_mnist_elastic.py"},
		warn: []string{"spec.cleanPodPolicy is not carried over: the runtime and trainyard decide when pods go"}},
	"mpi-operator/examples/v2beta1/horovod/tensorflow-mnist.yaml#1": {runtime: mpiRT, nodes: 2, procs: ptr.To[int32](1),
		image: "docker.io/kubeflow/mpi-horovod-mnist", cpu: "2", cmd: append(slices.Clone(horovodCmd), "/examples/tensorflow_mnist.py")},
	"mpi-operator/examples/v2beta1/pi/pi.yaml#1": {runtime: mpiRT, nodes: 2, procs: ptr.To[int32](1),
		image: "mpioperator/mpi-pi:openmpi", cpu: "1", cmd: mpiOnPiCmd,
		warn: append(slices.Clone(mpiV2), "spec.runPolicy.ttlSecondsAfterFinished is not carried over: the runtime and trainyard decide when pods go")},
	"mpi-operator/examples/v2beta1/pi/pi-intel.yaml#1": {runtime: mpiRT, nodes: 2, procs: ptr.To[int32](1),
		image: "mpioperator/mpi-pi:intel", cpu: "1", cmd: mpiOnPiCmd,
		warn: append(slices.Clone(mpiV2), "spec.mpiImplementation Intel is not carried over: Trainer's MPI runtimes run OpenMPI",
			"spec.mpiReplicaSpecs.Worker.template.spec.containers[mpi-worker].readinessProbe is not carried over: set it in the runtime")},
	"mpi-operator/examples/v2beta1/pi/pi-mpich.yaml#1": {runtime: mpiRT, nodes: 2, procs: ptr.To[int32](1),
		image: "mpioperator/mpi-pi:mpich", cpu: "1", cmd: mpiOnPiCmd,
		warn: append(slices.Clone(mpiV2), "spec.mpiImplementation MPICH is not carried over: Trainer's MPI runtimes run OpenMPI")},
	"mpi-operator/examples/v2beta1/tensorflow-benchmarks/tensorflow-benchmarks.yaml#1": {runtime: mpiRT, nodes: 2, procs: ptr.To[int32](1),
		image: "mpioperator/tensorflow-benchmarks:latest", gpus: 1,
		cmd: []string{"mpirun", "--allow-run-as-root", "-np", "2", "-bind-to", "none", "-map-by", "slot", "-x", "NCCL_DEBUG=INFO",
			"-x", "LD_LIBRARY_PATH", "-x", "PATH", "-mca", "pml", "ob1", "-mca", "btl", "^openib", "python",
			"scripts/tf_cnn_benchmarks/tf_cnn_benchmarks.py", "--model=resnet101", "--batch_size=64", "--variable_update=horovod"}},
}

var exampleKey = regexp.MustCompile(`^github\.com/kubeflow/([^@]+)@[^/]+/(.*)$`)

// TestConvertShippedExamples converts every PyTorchJob and MPIJob the
// operators ship as examples, as users copied them, on a hub with Kubeflow's
// runtimes; the other files of those folders are skipped with the reason.
func TestConvertShippedExamples(t *testing.T) {
	examples, err := tytesting.V1Examples()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, ex := range examples {
		key := exampleKey.ReplaceAllString(ex.Name, "$1/$2")
		t.Run(key, func(t *testing.T) {
			if ex.Skip != "" {
				t.Skip(ex.Skip)
			}
			seen[key] = true
			want, ok := shippedExamples[key]
			if !ok {
				t.Fatalf("a job the test does not know: add it to shippedExamples")
			}
			tj, warnings, err := ToTrainJob(ex.JSON, Options{PickRuntime: pickShipped, Queue: "lq"})
			if err != nil {
				t.Fatal(err)
			}
			checkExample(t, tj, warnings, want)
		})
	}
	for key := range shippedExamples {
		if !seen[key] {
			t.Errorf("%s was not found among the examples", key)
		}
	}
}

func checkExample(t *testing.T, tj *trainer.TrainJob, warnings []string, want exampleWant) {
	t.Helper()
	// What is printed is a TrainJob as Trainer's API has it, field for field.
	var printed trainer.TrainJob
	if err := yaml.UnmarshalStrict([]byte(convertedYAML(t, tj)), &printed); err != nil {
		t.Fatalf("printed TrainJob: %v", err)
	}
	if printed.Name == "" || printed.Labels[kueueconstants.QueueLabel] != "lq" || printed.Spec.RuntimeRef.Name != want.runtime {
		t.Errorf("name %q, queue %q, runtime %q; want a name, queue lq, runtime %s",
			printed.Name, printed.Labels[kueueconstants.QueueLabel], printed.Spec.RuntimeRef.Name, want.runtime)
	}
	tr := printed.Spec.Trainer
	if tr == nil {
		t.Fatal("no trainer")
	}
	got := exampleWant{
		runtime: want.runtime, nodes: ptr.Deref(tr.NumNodes, 0), procs: tr.NumProcPerNode, image: ptr.Deref(tr.Image, ""),
		cmd: append(slices.Clone(tr.Command), tr.Args...), warn: want.warn,
	}
	if r := tr.ResourcesPerNode; r != nil {
		q := r.Limits["nvidia.com/gpu"]
		got.gpus = q.Value()
		if c, ok := r.Limits["cpu"]; ok {
			got.cpu = c.String()
		}
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(exampleWant{})); diff != "" {
		t.Errorf("TrainJob (-want +got):\n%s", diff)
	}
	prefix := tj.Name + ": "
	for _, w := range want.warn {
		if !slices.ContainsFunc(warnings, func(g string) bool { return strings.HasSuffix(g, prefix+w) }) {
			t.Errorf("no warning %q among:\n%s", w, strings.Join(warnings, "\n"))
		}
	}
}

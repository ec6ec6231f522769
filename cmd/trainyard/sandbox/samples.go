package sandbox

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/kubeflow/trainer/v2/pkg/constants"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	kueueconstants "sigs.k8s.io/kueue/pkg/controller/constants"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/kubework"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/controllers"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/slurm"
	"github.com/trainyard-dev/trainyard/spoke/statusapi"
)

const (
	// sampleSpokeNamespace prefixes each tenant's namespace on the spokes.
	sampleSpokeNamespace = "jobs"
	cacheInitializerSA   = "kubeflow-trainer-cache-initializer"
	// SampleNamespace and SampleQueue are where the samples are queued.
	SampleNamespace = "team-a"
	SampleQueue     = "lq"
	sampleFlavor    = "gpu"
	// sampleRuntime is not named like any of Kubeflow's runtimes, so
	// applying those to the sandbox hub leaves the samples' own alone.
	sampleRuntime = "sandbox-torch"
	// SlurmQueue queues TorchSample onto the Slurm target alone: its
	// ClusterQueue's flavor hpcFlavor is served by "hpc" only.
	SlurmQueue = "hpc"
	hpcFlavor  = "hpc"
	// TorchSample runs real PyTorch on Slurm: torchrun and a gloo
	// all-reduce across 2 nodes, one process each.
	TorchSample = "torch-allreduce"
	// OCIQueue queues OCISample onto the Slurm target hpc-oci alone, which
	// runs every job in its image (containerRuntime OCI).
	OCIQueue     = "hpc-oci"
	hpcOCIFlavor = "hpc-oci"
	// OCISample runs a shell in sampleImage on 2 nodes of hpc-oci.
	OCISample = "oci-probe"
	// sampleImage is pushed to the sandbox registry at start: a shell and
	// SampleImageMarker (registry.ShellImage).
	sampleImage       = "trainyard/sandbox-probe:v1"
	SampleImageMarker = "the trainyard sandbox's sample image"
	// ociWorkDir is hpc-oci's spec.slurm.workDir.
	ociWorkDir = "/scratch/%u/trainyard"
)

// startTrainyard sets up a sample quota (a ClusterQueue with trainyard's
// admission check), a torch runtime, and runs the hub and one agent per
// spoke and per Slurm cluster in this process. The Slurm target "hpc"
// serves the same flavor from its gpu partition, running team-a's jobs as
// the Unix user alice, and also the flavor of queue team-a/hpc, which no
// spoke serves (setUpSlurmQueues). The Slurm target "hpc-oci" serves only
// queue team-a/hpc-oci's flavor: it runs every job in its image, and the
// images Kubeflow's runtimes name are out of reach without internet.
func startTrainyard(ctx context.Context, f *fleet.Fleet, sl, slOCI *slurm.Cluster, o Options) (*controllers.Controllers, error) {
	if err := controllers.SetUpQueue(ctx, f.Hub, sampleQueue(f, o, sl != nil)); err != nil {
		return nil, err
	}
	if err := f.Hub.Client.Create(ctx, SampleClusterRuntime()); err != nil {
		return nil, err
	}
	opts := controllers.Options{
		Flavor: sampleFlavor, TopologyLevels: []string{"topology.kubernetes.io/rack"},
		HeartbeatInterval: 2 * time.Second, SpokeNamespace: sampleSpokeNamespace,
		// Kubeflow's data-cache runtime runs its initializer as this
		// account; the sandbox allows it and creates it, as a site using
		// the cache would.
		AllowedPodFields: &v1alpha1.AllowedPodFields{ServiceAccountNames: []string{cacheInitializerSA}},
	}
	for _, s := range f.Spokes {
		ns := kubework.TenantNamespace(sampleSpokeNamespace, SampleNamespace)
		if err := s.EnsureNamespace(ctx, ns); err != nil {
			return nil, err
		}
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: cacheInitializerSA, Namespace: ns}}
		if err := s.Client.Create(ctx, sa); client.IgnoreAlreadyExists(err) != nil {
			return nil, err
		}
	}
	if sl != nil {
		if err := setUpSlurmQueues(ctx, f); err != nil {
			return nil, err
		}
		if err := slOCI.MakeWorkDirs(ctx, ociWorkDir, "alice"); err != nil {
			return nil, err
		}
		alice := []v1alpha1.SlurmAccount{{Namespace: SampleNamespace, User: "alice"}}
		status, err := sampleStatusEndpoint(filepath.Join(o.Dir, "status-hpc"))
		if err != nil {
			return nil, err
		}
		opts.Slurm = []controllers.SlurmTarget{{Name: "hpc", Cluster: sl, APIVersion: "v0.0.42",
			// TorchSample reports its progress here: the emulated nodes
			// share this machine's loopback.
			Status:     status,
			Partitions: []v1alpha1.SlurmPartition{{Flavor: sampleFlavor, Partition: "gpu"}, {Flavor: hpcFlavor, Partition: "gpu"}},
			Accounts:   alice,
			// hpc runs commands on its nodes: the chroot's Debian PyTorch
			// stands for the PyTorch images the sample runtime names. A job
			// naming any other image is not placed here, and is told why.
			Images: &v1alpha1.TargetImages{HostEnvironment: []string{"docker.io/pytorch/pytorch:*"}},
		}, {Name: "hpc-oci", Cluster: slOCI, APIVersion: "v0.0.42", ContainerRuntime: v1alpha1.ContainerRuntimeOCI,
			// OCI unpacks the image once, where every node sees it.
			WorkDir:    ociWorkDir,
			Partitions: []v1alpha1.SlurmPartition{{Flavor: hpcOCIFlavor, Partition: "gpu"}},
			Accounts:   alice,
		}}
	}
	return controllers.Start(ctx, f, opts)
}

// sampleStatusEndpoint is the status endpoint of the Slurm target hpc on a
// free loopback port, its key and CA kept in dir.
func sampleStatusEndpoint(dir string) (*statusapi.EndpointOptions, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	return &statusapi.EndpointOptions{Listen: addr, URL: "https://" + addr, StateDir: dir}, nil
}

// SampleClusterRuntime is a torch runtime in the shape of Trainer's own
// torch-distributed one, whose pods kwok runs for 45 seconds. No toleration
// and no node selector: spoke nodes carry no taint, so runtimes as Kubeflow
// ships them run there too. A job that brings no command runs the
// runtime's (runtimeProgram), which kwok pretends to run and the Slurm
// nodes' own PyTorch really runs, so such a job succeeds wherever it is
// placed.
func SampleClusterRuntime() *trainer.ClusterTrainingRuntime {
	return &trainer.ClusterTrainingRuntime{
		ObjectMeta: metav1.ObjectMeta{Name: sampleRuntime},
		Spec: trainer.TrainingRuntimeSpec{
			MLPolicy: &trainer.MLPolicy{
				NumNodes:       ptr.To[int32](1),
				MLPolicySource: trainer.MLPolicySource{Torch: &trainer.TorchMLPolicySource{}},
			},
			Template: trainer.JobSetTemplateSpec{Spec: jobsetv1alpha2.JobSetSpec{
				ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{{
					Name:     constants.Node,
					Replicas: 1,
					Template: batchv1.JobTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{constants.LabelTrainJobAncestor: constants.AncestorTrainer}},
						Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
							ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"kwok.trainyard.dev/run-for": "45s"}},
							Spec: corev1.PodSpec{
								RestartPolicy: corev1.RestartPolicyNever,
								Containers: []corev1.Container{{
									Name:    constants.Node,
									Image:   "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
									Command: []string{"python3", "-c", runtimeProgram},
								}},
							},
						}},
					},
				}},
			}},
		},
	}
}

// runtimeProgram is the sample runtime's own command: it prints the
// PyTorch and the torch wiring the job got, and ends.
const runtimeProgram = `import os, torch
print("torch", torch.__version__, "node rank", os.environ.get("PET_NODE_RANK"), "of", os.environ.get("PET_NNODES"), flush=True)
`

// sampleProgram is what sample jobs run: kwok ignores it on the spokes; on
// Slurm it prints the torch wiring it got and works for 45 seconds.
const sampleProgram = `import os, time
print("node rank", os.environ["PET_NODE_RANK"], "of", os.environ["PET_NNODES"], "master", os.environ["PET_MASTER_ADDR"], flush=True)
time.sleep(45)
`

// sampleTrainJob is a two-node TrainJob of 4 GPUs per node.
func sampleTrainJob(name string) *trainer.TrainJob {
	gpus := *resource.NewQuantity(4, resource.DecimalSI)
	return &trainer.TrainJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: SampleNamespace, Labels: map[string]string{kueueconstants.QueueLabel: SampleQueue}},
		Spec: trainer.TrainJobSpec{
			RuntimeRef: trainer.RuntimeRef{
				Name: sampleRuntime, APIGroup: ptr.To(trainer.GroupVersion.Group), Kind: ptr.To(trainer.ClusterTrainingRuntimeKind),
			},
			Trainer: &trainer.Trainer{
				NumNodes: ptr.To[int32](2),
				ResourcesPerNode: &corev1.ResourceRequirements{
					Requests: corev1.ResourceList{fleet.GPUResource: gpus},
					Limits:   corev1.ResourceList{fleet.GPUResource: gpus},
				},
				Command: []string{"python3", "-c", sampleProgram},
			},
		},
	}
}

// AllReduceProgram sums rank+1 over every rank with gloo and prints the
// result: with 2 ranks, "sum=3" on each. The sandbox's torch sample runs it,
// and the Slurm suites check its output.
const AllReduceProgram = `import torch
import torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print(f"allreduce rank={dist.get_rank()} world={dist.get_world_size()} sum={t.item():g}", flush=True)
dist.destroy_process_group()
`

// TorchSampleProgram is what TorchSample runs: six steps of a gloo
// all-reduce, SAMPLE_STEP_SECONDS (10) apart, after each of which rank 0
// reports its progress, an ETA and a loss through Trainer's TrainJob status
// API as Kubeflow's training callbacks do, with Python's standard library
// only: the URL, token file and CA file of Trainer's three variables. A
// report that fails is printed and training goes on; without the variables
// (run by neither Trainer nor trainyard) nothing is reported. Its last line
// is AllReduceProgram's: "sum=3" on each of 2 ranks.
const TorchSampleProgram = `import datetime, json, os, ssl, time, urllib.request
import torch
import torch.distributed as dist

STEPS = 6
STEP_SECONDS = float(os.environ.get("SAMPLE_STEP_SECONDS", "10"))

def report(step, loss, started):
    url = os.environ.get("KUBEFLOW_TRAINER_SERVER_URL")
    if not url:
        return
    pct = step * 100 // STEPS
    try:
        with open(os.environ["KUBEFLOW_TRAINER_SERVER_TOKEN"]) as f:
            token = f.read().strip()
        ctx = ssl.create_default_context(cafile=os.environ["KUBEFLOW_TRAINER_SERVER_CA_CERT"])
        remaining = int((time.monotonic() - started) / step * (STEPS - step))
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {"trainerStatus": {"progressPercentage": pct, "estimatedRemainingSeconds": remaining,
            "metrics": [{"name": "loss", "value": "%.4f" % loss}, {"name": "step", "value": str(step)}],
            "lastUpdatedTime": now}}
        req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
            headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            print("progress %d%% reported: %d" % (pct, r.status), flush=True)
    except Exception as e:
        print("[Kubeflow] Unable to send trainer status. %s" % e, flush=True)

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
started = time.monotonic()
for step in range(1, STEPS + 1):
    time.sleep(STEP_SECONDS)
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    if rank == 0:
        report(step, 1.0 / (step * t.item()), started)
print(f"allreduce rank={rank} world={world} sum={t.item():g}", flush=True)
dist.destroy_process_group()
`

// slurmSample is a two-node TrainJob of 1 GPU per node (so one process
// per node) in queue.
func slurmSample(name, queue string) *trainer.TrainJob {
	tj := sampleTrainJob(name)
	tj.Labels[kueueconstants.QueueLabel] = queue
	one := *resource.NewQuantity(1, resource.DecimalSI)
	tj.Spec.Trainer.ResourcesPerNode = &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{fleet.GPUResource: one},
		Limits:   corev1.ResourceList{fleet.GPUResource: one},
	}
	return tj
}

// torchSample is TorchSample: torchrun, started by trainyard's torchrun
// launcher on 2 Slurm nodes, runs TorchSampleProgram's gloo all-reduces on
// the CPU (the chroot's Debian PyTorch) for about a minute, reporting its
// progress to the agent of hpc. All emulated nodes are one host, so gloo
// uses loopback.
func torchSample() *trainer.TrainJob {
	tj := slurmSample(TorchSample, SlurmQueue)
	tj.Spec.Trainer.Command = []string{"torchrun", "--no-python", "python3", "-c", TorchSampleProgram}
	tj.Spec.Trainer.Env = []corev1.EnvVar{{Name: "GLOO_SOCKET_IFNAME", Value: "lo"}}
	return tj
}

// ociProbe is what OCISample runs in the image's /bin/sh: it says on
// which node rank it runs, whether it sees the node's Slurm (the image has
// none) and which image it is in.
const ociProbe = `if [ -e /usr/sbin/slurmd ]; then where=bare-node; else where=container; fi
echo "oci-probe rank=$PET_NODE_RANK of $PET_NNODES in=$where image=$(cat /etc/trainyard-image)"
`

// ociSample is OCISample: ociProbe in image on 2 nodes of hpc-oci.
func ociSample(image string) *trainer.TrainJob {
	tj := slurmSample(OCISample, OCIQueue)
	tj.Spec.Trainer.Image = &image
	tj.Spec.Trainer.Command = []string{"/bin/sh", "-c", ociProbe}
	return tj
}

// submitRetrying submits one of the Slurm samples. Its runtime's pinned
// copy may be only milliseconds old, and Kueue's TrainJob webhook reads
// runtimes from its own cache: a "not found" is retried for a few seconds,
// as kubectl users would.
func submitRetrying(ctx context.Context, f *fleet.Fleet, tj *trainer.TrainJob) error {
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		if err = f.Hub.Client.Create(ctx, tj.DeepCopy()); err == nil || !strings.Contains(err.Error(), "not found") || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	if err != nil {
		return fmt.Errorf("submit %s: %w", tj.Name, err)
	}
	return nil
}

// submitSamples submits n sample TrainJobs.
func submitSamples(ctx context.Context, f *fleet.Fleet, n int) error {
	for i := 0; i < n; i++ {
		tj := sampleTrainJob(fmt.Sprintf("sample-%d", i))
		if err := f.Hub.Client.Create(ctx, tj); err != nil {
			return fmt.Errorf("submit %s: %w", tj.Name, err)
		}
	}
	return nil
}

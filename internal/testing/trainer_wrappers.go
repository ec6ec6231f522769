package testing

import (
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/kubeflow/trainer/v2/pkg/constants"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	kueueconstants "sigs.k8s.io/kueue/pkg/controller/constants"
)

// PriorityClassLabel names the WorkloadPriorityClass of a job.
const PriorityClassLabel = "kueue.x-k8s.io/priority-class"

// TrainJobWrapper builds a Kubeflow Trainer TrainJob.
type TrainJobWrapper struct{ trainer.TrainJob }

// MakeTrainJob returns a TrainJob referring to the ClusterTrainingRuntime
// "torch-distributed".
func MakeTrainJob(name, ns string) *TrainJobWrapper {
	return &TrainJobWrapper{trainer.TrainJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: trainer.TrainJobSpec{
			RuntimeRef: trainer.RuntimeRef{
				Name: "torch-distributed", APIGroup: ptr.To(trainer.GroupVersion.Group),
				Kind: ptr.To(trainer.ClusterTrainingRuntimeKind),
			},
		},
	}}
}

// Obj returns the built object.
func (w *TrainJobWrapper) Obj() *trainer.TrainJob { return &w.TrainJob }

// Clone returns a deep copy of the wrapper.
func (w *TrainJobWrapper) Clone() *TrainJobWrapper { return &TrainJobWrapper{*w.DeepCopy()} }

// Queue sets the Kueue LocalQueue label.
func (w *TrainJobWrapper) Queue(q string) *TrainJobWrapper {
	if w.Labels == nil {
		w.Labels = map[string]string{}
	}
	w.Labels[kueueconstants.QueueLabel] = q
	return w
}

// PriorityClass sets the Kueue WorkloadPriorityClass label.
func (w *TrainJobWrapper) PriorityClass(name string) *TrainJobWrapper {
	if w.Labels == nil {
		w.Labels = map[string]string{}
	}
	w.Labels[PriorityClassLabel] = name
	return w
}

// Suspend sets spec.suspend.
func (w *TrainJobWrapper) Suspend(s bool) *TrainJobWrapper { w.Spec.Suspend = ptr.To(s); return w }

// RuntimeRef points the job at a runtime of the given kind.
func (w *TrainJobWrapper) RuntimeRef(kind, name string) *TrainJobWrapper {
	w.Spec.RuntimeRef = trainer.RuntimeRef{Name: name, APIGroup: ptr.To(trainer.GroupVersion.Group), Kind: ptr.To(kind)}
	return w
}

func (w *TrainJobWrapper) trainer() *trainer.Trainer {
	if w.Spec.Trainer == nil {
		w.Spec.Trainer = &trainer.Trainer{}
	}
	return w.Spec.Trainer
}

// NumNodes sets spec.trainer.numNodes.
func (w *TrainJobWrapper) NumNodes(n int32) *TrainJobWrapper {
	w.trainer().NumNodes = ptr.To(n)
	return w
}

// GPUsPerNode requests n nvidia.com/gpu per node.
func (w *TrainJobWrapper) GPUsPerNode(n int64) *TrainJobWrapper {
	q := *resource.NewQuantity(n, resource.DecimalSI)
	w.trainer().ResourcesPerNode = &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{"nvidia.com/gpu": q},
		Limits:   corev1.ResourceList{"nvidia.com/gpu": q},
	}
	return w
}

// Command sets the trainer command and args.
func (w *TrainJobWrapper) Command(cmd []string, args ...string) *TrainJobWrapper {
	w.trainer().Command, w.trainer().Args = cmd, args
	return w
}

// ClusterTrainingRuntimeWrapper builds a ClusterTrainingRuntime.
type ClusterTrainingRuntimeWrapper struct{ trainer.ClusterTrainingRuntime }

// MakeClusterTrainingRuntime returns a torch runtime with one "node"
// replicated job, in the shape Trainer's own torch-distributed runtime has.
func MakeClusterTrainingRuntime(name string) *ClusterTrainingRuntimeWrapper {
	return &ClusterTrainingRuntimeWrapper{trainer.ClusterTrainingRuntime{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       TorchRuntimeSpec(1),
	}}
}

// Obj returns the built object.
func (w *ClusterTrainingRuntimeWrapper) Obj() *trainer.ClusterTrainingRuntime {
	return &w.ClusterTrainingRuntime
}

// Spec replaces the runtime spec.
func (w *ClusterTrainingRuntimeWrapper) Spec(spec trainer.TrainingRuntimeSpec) *ClusterTrainingRuntimeWrapper {
	w.ClusterTrainingRuntime.Spec = spec
	return w
}

// PodAnnotation sets an annotation on every pod template of the runtime
// (for example kwok.trainyard.dev/run-for, read by the harness's kwok).
func (w *ClusterTrainingRuntimeWrapper) PodAnnotation(k, v string) *ClusterTrainingRuntimeWrapper {
	for i := range w.ClusterTrainingRuntime.Spec.Template.Spec.ReplicatedJobs {
		tpl := &w.ClusterTrainingRuntime.Spec.Template.Spec.ReplicatedJobs[i].Template.Spec.Template
		if tpl.Annotations == nil {
			tpl.Annotations = map[string]string{}
		}
		tpl.Annotations[k] = v
	}
	return w
}

// Toleration adds a toleration to every pod template of the runtime.
func (w *ClusterTrainingRuntimeWrapper) Toleration(t corev1.Toleration) *ClusterTrainingRuntimeWrapper {
	for i := range w.ClusterTrainingRuntime.Spec.Template.Spec.ReplicatedJobs {
		ps := &w.ClusterTrainingRuntime.Spec.Template.Spec.ReplicatedJobs[i].Template.Spec.Template.Spec
		ps.Tolerations = append(ps.Tolerations, t)
	}
	return w
}

// Image sets the image of the runtime's node container.
func (w *ClusterTrainingRuntimeWrapper) Image(image string) *ClusterTrainingRuntimeWrapper {
	for i := range w.ClusterTrainingRuntime.Spec.Template.Spec.ReplicatedJobs {
		ps := &w.ClusterTrainingRuntime.Spec.Template.Spec.ReplicatedJobs[i].Template.Spec.Template.Spec
		for j := range ps.Containers {
			ps.Containers[j].Image = image
		}
	}
	return w
}

// TorchRuntimeSpec is a torch runtime spec with numNodes nodes.
func TorchRuntimeSpec(numNodes int32) trainer.TrainingRuntimeSpec {
	return trainer.TrainingRuntimeSpec{
		MLPolicy: &trainer.MLPolicy{
			NumNodes:       ptr.To(numNodes),
			MLPolicySource: trainer.MLPolicySource{Torch: &trainer.TorchMLPolicySource{}},
		},
		Template: trainer.JobSetTemplateSpec{Spec: jobsetv1alpha2.JobSetSpec{
			ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{{
				Name:     constants.Node,
				Replicas: 1,
				Template: batchv1.JobTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{constants.LabelTrainJobAncestor: constants.AncestorTrainer}},
					Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
						RestartPolicy: corev1.RestartPolicyNever,
						Containers: []corev1.Container{{
							Name:    constants.Node,
							Image:   "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
							Command: []string{"torchrun", "train.py"},
						}},
					}}},
				},
			}},
		}},
	}
}

// MPIRuntimeSpec returns an OpenMPI runtime in the shape of Trainer's own
// MPI runtimes: a "launcher" job that runs mpirun and a "node" job whose
// pods run sshd, procs MPI processes per node.
func MPIRuntimeSpec(numNodes, procs int32) trainer.TrainingRuntimeSpec {
	container := func(cmd ...string) corev1.Container {
		return corev1.Container{Name: constants.Node, Image: "mpioperator/mpi-pi:openmpi", Command: cmd}
	}
	job := func(name string, labels map[string]string, c corev1.Container) jobsetv1alpha2.ReplicatedJob {
		return jobsetv1alpha2.ReplicatedJob{
			Name: name, Replicas: 1,
			Template: batchv1.JobTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{c},
				}}},
			},
		}
	}
	return trainer.TrainingRuntimeSpec{
		MLPolicy: &trainer.MLPolicy{
			NumNodes: ptr.To(numNodes),
			MLPolicySource: trainer.MLPolicySource{MPI: &trainer.MPIMLPolicySource{
				NumProcPerNode: ptr.To(procs), MPIImplementation: ptr.To(trainer.MPIImplementationOpenMPI),
				SSHAuthMountPath: ptr.To("/home/mpiuser/.ssh"), RunLauncherAsNode: ptr.To(false),
			}},
		},
		Template: trainer.JobSetTemplateSpec{Spec: jobsetv1alpha2.JobSetSpec{
			ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{
				job(constants.Launcher, map[string]string{constants.LabelTrainJobAncestor: constants.AncestorTrainer}, container("mpirun", "/home/mpiuser/pi")),
				job(constants.Node, nil, container("/usr/sbin/sshd", "-De")),
			},
		}},
	}
}

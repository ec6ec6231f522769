// Package convert turns Training Operator V1 jobs (kubeflow.org/v1
// PyTorchJob and MPIJob) and mpi-operator's kubeflow.org/v2beta1 MPIJobs
// into Kubeflow Trainer TrainJobs that refer to a runtime (ToTrainJob), with
// a warning for every field a TrainJob cannot carry. Without a runtime
// given, a RuntimeCatalog picks one from the hub's. `trainyard convert` in
// package cli is its command.
package convert

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"sort"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	kueueconstants "sigs.k8s.io/kueue/pkg/controller/constants"
)

// The jobs convert reads: Training Operator V1's kubeflow.org/v1 PyTorchJob
// and MPIJob, and mpi-operator's kubeflow.org/v2beta1 MPIJob. Only the
// fields carried over, or explicitly warned about, are declared: every other
// field of the input is found by unreadFields and named in a warning.
const (
	trainingOperatorV1 = "kubeflow.org/v1"
	mpiOperatorV2beta1 = "kubeflow.org/v2beta1"
	kindPyTorchJob     = "PyTorchJob"
	kindMPIJob         = "MPIJob"
)

// Replica types of the two kinds.
const (
	replicaMaster   = "Master"
	replicaWorker   = "Worker"
	replicaLauncher = "Launcher"
)

type v1Job struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Metadata   v1Meta    `json:"metadata"`
	Spec       v1JobSpec `json:"spec"`
}

type v1Meta struct {
	Name         string            `json:"name,omitempty"`
	GenerateName string            `json:"generateName,omitempty"`
	Namespace    string            `json:"namespace,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Annotations  map[string]string `json:"annotations,omitempty"`
}

type v1JobSpec struct {
	RunPolicy *v1RunPolicy `json:"runPolicy,omitempty"`
	// PyTorchJob.
	PyTorchReplicaSpecs map[string]*v1ReplicaSpec `json:"pytorchReplicaSpecs,omitempty"`
	NprocPerNode        *intstr.IntOrString       `json:"nprocPerNode,omitempty"`
	ElasticPolicy       *v1ElasticPolicy          `json:"elasticPolicy,omitempty"`
	// MPIJob, both versions.
	MPIReplicaSpecs map[string]*v1ReplicaSpec `json:"mpiReplicaSpecs,omitempty"`
	SlotsPerWorker  *int32                    `json:"slotsPerWorker,omitempty"`
	// MPIJob kubeflow.org/v1.
	MainContainer *string `json:"mainContainer,omitempty"`
	// MPIJob kubeflow.org/v2beta1.
	RunLauncherAsWorker *bool  `json:"runLauncherAsWorker,omitempty"`
	MPIImplementation   string `json:"mpiImplementation,omitempty"`
}

type v1RunPolicy struct {
	ActiveDeadlineSeconds *int64 `json:"activeDeadlineSeconds,omitempty"`
	Suspend               *bool  `json:"suspend,omitempty"`
}

// v1ElasticPolicy is read for its deprecated nProcPerNode; its other fields
// (replica bounds, rendezvous, restarts, metrics) are warned about.
type v1ElasticPolicy struct {
	NProcPerNode *int32 `json:"nProcPerNode,omitempty"`
}

type v1ReplicaSpec struct {
	Replicas      *int32        `json:"replicas,omitempty"`
	RestartPolicy *string       `json:"restartPolicy,omitempty"`
	Template      v1PodTemplate `json:"template"`
}

type v1PodTemplate struct {
	Spec v1PodSpec `json:"spec"`
}

type v1PodSpec struct {
	Containers []v1Container `json:"containers"`
}

type v1Container struct {
	Name      string                       `json:"name"`
	Image     *string                      `json:"image,omitempty"`
	Command   []string                     `json:"command,omitempty"`
	Args      []string                     `json:"args,omitempty"`
	Env       []corev1.EnvVar              `json:"env,omitempty"`
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
}

// Options choose the runtime, namespace and queue of converted jobs.
type Options struct {
	// Runtime is the runtime's name; when empty, PickRuntime chooses one.
	Runtime string
	// RuntimeKind is Runtime's kind; default ClusterTrainingRuntime.
	RuntimeKind string
	// PickRuntime chooses a runtime with the ML policy a job needs ("torch"
	// or "mpi") for a job in namespace ("" when the input names none). It
	// returns the runtime and, for a TrainingRuntime, its namespace.
	PickRuntime func(policy MLPolicy, namespace string) (trainer.RuntimeRef, string, error)
	// Namespace, when set, replaces the input's metadata.namespace.
	Namespace string
	// Queue, when set, is the kueue.x-k8s.io/queue-name label.
	Queue string
}

// conversion collects the warnings of one job's conversion.
type conversion struct {
	job      *v1Job
	warnings []string
	// skipped are input paths already warned about as a whole.
	skipped map[string]bool
}

func (c *conversion) warnf(format string, args ...any) {
	c.warnings = append(c.warnings, fmt.Sprintf("%s/%s: ", c.job.Kind, c.job.Metadata.Name)+fmt.Sprintf(format, args...))
}

// ToTrainJob turns one PyTorchJob or MPIJob (as JSON) into a TrainJob, with a
// warning for every field it cannot carry over.
func ToTrainJob(doc []byte, o Options) (*trainer.TrainJob, []string, error) {
	var job v1Job
	if err := json.Unmarshal(doc, &job); err != nil {
		return nil, nil, err
	}
	policy, ok := policyOfJob(job.APIVersion, job.Kind)
	if !ok {
		return nil, nil, fmt.Errorf("cannot convert %s %s: want a %s PyTorchJob, or a %s or %s MPIJob",
			job.APIVersion, job.Kind, trainingOperatorV1, trainingOperatorV1, mpiOperatorV2beta1)
	}
	c := &conversion{job: &job, skipped: map[string]bool{}}
	tj := c.newTrainJob(o)
	var err error
	if job.Kind == kindPyTorchJob {
		err = c.pytorch(tj)
	} else {
		err = c.mpi(tj)
	}
	if err == nil {
		err = c.runtimeRef(tj, policy, o)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s/%s: %w", job.Kind, job.Metadata.Name, err)
	}
	if err := c.warnUnread(doc); err != nil {
		return nil, nil, err
	}
	return tj, c.warnings, nil
}

// policyOfJob is the ML policy a runtime needs to run a job of this kind.
func policyOfJob(apiVersion, kind string) (MLPolicy, bool) {
	switch {
	case apiVersion == trainingOperatorV1 && kind == kindPyTorchJob:
		return policyTorch, true
	case (apiVersion == trainingOperatorV1 || apiVersion == mpiOperatorV2beta1) && kind == kindMPIJob:
		return policyMPI, true
	}
	return "", false
}

// runtimeRef sets the runtime: the one the options name, else the one
// PickRuntime chooses; a TrainingRuntime picked in the default namespace
// puts the job there too, as the reference resolves only there.
func (c *conversion) runtimeRef(tj *trainer.TrainJob, policy MLPolicy, o Options) error {
	if o.Runtime != "" {
		tj.Spec.RuntimeRef = trainer.RuntimeRef{
			Name: o.Runtime, APIGroup: ptr.To(trainer.GroupVersion.Group),
			Kind: ptr.To(cmp.Or(o.RuntimeKind, trainer.ClusterTrainingRuntimeKind)),
		}
		return nil
	}
	if o.PickRuntime == nil {
		return fmt.Errorf("no runtime: pass --runtime")
	}
	ref, ns, err := o.PickRuntime(policy, tj.Namespace)
	if err != nil {
		return err
	}
	tj.Spec.RuntimeRef = ref
	if tj.Namespace == "" && ptr.Deref(ref.Kind, "") == trainer.TrainingRuntimeKind {
		tj.Namespace = ns
	}
	return nil
}

// newTrainJob carries the metadata and run policy over.
func (c *conversion) newTrainJob(o Options) *trainer.TrainJob {
	j := c.job
	tj := &trainer.TrainJob{
		TypeMeta: metav1.TypeMeta{APIVersion: trainer.GroupVersion.String(), Kind: trainer.TrainJobKind},
		ObjectMeta: metav1.ObjectMeta{
			Name: j.Metadata.Name, GenerateName: j.Metadata.GenerateName, Namespace: cmp.Or(o.Namespace, j.Metadata.Namespace),
			Labels: maps.Clone(j.Metadata.Labels), Annotations: maps.Clone(j.Metadata.Annotations),
		},
	}
	if _, ok := tj.Annotations[lastApplied]; ok {
		delete(tj.Annotations, lastApplied)
		if len(tj.Annotations) == 0 {
			tj.Annotations = nil
		}
	}
	if o.Queue != "" {
		if tj.Labels == nil {
			tj.Labels = map[string]string{}
		}
		tj.Labels[kueueconstants.QueueLabel] = o.Queue
	}
	if tj.Labels[kueueconstants.QueueLabel] == "" {
		c.warnf("no %s label (pass --queue): Kueue will not queue the TrainJob, so trainyard will not dispatch it", kueueconstants.QueueLabel)
	}
	if rp := j.Spec.RunPolicy; rp != nil {
		tj.Spec.ActiveDeadlineSeconds = ptr.Deref(rp.ActiveDeadlineSeconds, 0)
		tj.Spec.Suspend = rp.Suspend
	}
	return tj
}

// trainerOf carries a container's image, command, args, env and resources.
func trainerOf(ctr *v1Container) *trainer.Trainer {
	return &trainer.Trainer{
		Image: ctr.Image, Command: ctr.Command, Args: ctr.Args, Env: ctr.Env, ResourcesPerNode: ctr.Resources,
	}
}

// replicas is a replica spec's count, def when unset (the operators default
// it), 0 when the replica type is absent.
func replicas(rs *v1ReplicaSpec, def int32) int32 {
	if rs == nil {
		return 0
	}
	return ptr.Deref(rs.Replicas, def)
}

// unknownReplicas warns about replica types the kind does not have.
func (c *conversion) unknownReplicas(base string, specs map[string]*v1ReplicaSpec, known ...string) {
	var names []string
	for name := range specs {
		if name != known[0] && name != known[1] {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		c.skipped[base+"."+name] = true
		c.warnf("%s.%s is not carried over: %ss have only %s and %s replicas", base, name, c.job.Kind, known[0], known[1])
	}
}

// mainContainer returns the container named want, else the only or first
// one; the others are sidecars, warned about and skipped.
func (c *conversion) mainContainer(base, replica string, rs *v1ReplicaSpec, want string) (*v1Container, error) {
	ctrs := rs.Template.Spec.Containers
	if len(ctrs) == 0 {
		return nil, fmt.Errorf("%s.%s.template.spec.containers is empty", base, replica)
	}
	main := 0
	for i := range ctrs {
		if ctrs[i].Name == want {
			main = i
		}
	}
	if ctrs[main].Name != want && len(ctrs) > 1 {
		c.warnf("%s %s has no container named %q: using %q as the training container", base+"."+replica, "template", want, ctrs[main].Name)
	}
	for i := range ctrs {
		if i == main {
			continue
		}
		path := fmt.Sprintf("%s.%s.template.spec.containers[%s]", base, replica, ctrs[i].Name)
		if !c.skipped[path] {
			c.skipped[path] = true
			c.warnf("%s is not carried over: a TrainJob runs one training container per node (add sidecars to the runtime)", path)
		}
	}
	return &ctrs[main], nil
}

// restartPolicy warns about a replica restart policy other than Never.
func (c *conversion) restartPolicy(base, replica string, rs *v1ReplicaSpec) {
	if rs == nil || rs.RestartPolicy == nil || *rs.RestartPolicy == "" || *rs.RestartPolicy == string(corev1.RestartPolicyNever) {
		return
	}
	c.warnf("%s.%s.restartPolicy %s is not carried over: restarts follow the runtime's failurePolicy", base, replica, *rs.RestartPolicy)
}

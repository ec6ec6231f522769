package cli

import (
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"strconv"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// Training Operator V1 (kubeflow.org/v1) as far as convert reads it. Only
// the fields carried over, or explicitly warned about, are declared: every
// other field of the input is found by unreadFields and named in a warning.
const (
	trainingOperatorV1 = "kubeflow.org/v1"
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
	// MPIJob.
	MPIReplicaSpecs map[string]*v1ReplicaSpec `json:"mpiReplicaSpecs,omitempty"`
	SlotsPerWorker  *int32                    `json:"slotsPerWorker,omitempty"`
	MainContainer   *string                   `json:"mainContainer,omitempty"`
}

type v1RunPolicy struct {
	ActiveDeadlineSeconds *int64 `json:"activeDeadlineSeconds,omitempty"`
	Suspend               *bool  `json:"suspend,omitempty"`
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

// ConvertOptions choose the runtime converted jobs refer to.
type ConvertOptions struct {
	// Runtime defaults to DefaultTorchRuntime or DefaultMPIRuntime.
	Runtime string
	// RuntimeKind defaults to ClusterTrainingRuntime.
	RuntimeKind string
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

// Convert turns one kubeflow.org/v1 PyTorchJob or MPIJob (as JSON) into a
// TrainJob, with a warning for every field it cannot carry over.
func Convert(doc []byte, o ConvertOptions) (*trainer.TrainJob, []string, error) {
	var job v1Job
	if err := json.Unmarshal(doc, &job); err != nil {
		return nil, nil, err
	}
	if job.APIVersion != trainingOperatorV1 || (job.Kind != kindPyTorchJob && job.Kind != kindMPIJob) {
		return nil, nil, fmt.Errorf("cannot convert %s %s: want a %s PyTorchJob or MPIJob", job.APIVersion, job.Kind, trainingOperatorV1)
	}
	if o.RuntimeKind == "" {
		o.RuntimeKind = trainer.ClusterTrainingRuntimeKind
	}
	c := &conversion{job: &job, skipped: map[string]bool{}}
	tj := c.newTrainJob(o)
	var err error
	if job.Kind == kindPyTorchJob {
		err = c.pytorch(tj)
	} else {
		err = c.mpi(tj)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s/%s: %w", job.Kind, job.Metadata.Name, err)
	}
	if err := c.warnUnread(doc); err != nil {
		return nil, nil, err
	}
	return tj, c.warnings, nil
}

// newTrainJob carries the metadata and run policy over.
func (c *conversion) newTrainJob(o ConvertOptions) *trainer.TrainJob {
	j := c.job
	rt := o.Runtime
	if rt == "" {
		rt = DefaultTorchRuntime
		if j.Kind == kindMPIJob {
			rt = DefaultMPIRuntime
		}
	}
	tj := &trainer.TrainJob{
		TypeMeta: metav1.TypeMeta{APIVersion: trainer.GroupVersion.String(), Kind: trainer.TrainJobKind},
		ObjectMeta: metav1.ObjectMeta{
			Name: j.Metadata.Name, GenerateName: j.Metadata.GenerateName, Namespace: j.Metadata.Namespace,
			Labels: maps.Clone(j.Metadata.Labels), Annotations: maps.Clone(j.Metadata.Annotations),
		},
		Spec: trainer.TrainJobSpec{RuntimeRef: trainer.RuntimeRef{
			Name: rt, APIGroup: ptr.To(trainer.GroupVersion.Group), Kind: ptr.To(o.RuntimeKind),
		}},
	}
	if _, ok := tj.Annotations[lastApplied]; ok {
		delete(tj.Annotations, lastApplied)
		if len(tj.Annotations) == 0 {
			tj.Annotations = nil
		}
	}
	if tj.Labels[QueueLabel] == "" {
		c.warnf("no %s label: Kueue will not queue the TrainJob, so trainyard will not dispatch it", QueueLabel)
	}
	if rp := j.Spec.RunPolicy; rp != nil {
		tj.Spec.ActiveDeadlineSeconds = ptr.Deref(rp.ActiveDeadlineSeconds, 0)
		tj.Spec.Suspend = rp.Suspend
	}
	return tj
}

// pytorch maps Master and Worker onto numNodes nodes running the Worker's
// (or else the Master's) training container.
func (c *conversion) pytorch(tj *trainer.TrainJob) error {
	specs := c.job.Spec.PyTorchReplicaSpecs
	base := "spec.pytorchReplicaSpecs"
	c.unknownReplicas(base, specs, replicaMaster, replicaWorker)
	master, worker := specs[replicaMaster], specs[replicaWorker]
	primary, primaryType := worker, replicaWorker
	if worker == nil {
		primary, primaryType = master, replicaMaster
	}
	if primary == nil {
		return fmt.Errorf("%s has neither %s nor %s", base, replicaMaster, replicaWorker)
	}
	main, err := c.mainContainer(base, primaryType, primary, "pytorch")
	if err != nil {
		return err
	}
	t := trainerOf(main)
	t.NumNodes = ptr.To(replicas(master) + replicas(worker))
	c.restartPolicy(base, replicaMaster, master)
	c.restartPolicy(base, replicaWorker, worker)
	if master != nil && worker != nil {
		m, err := c.mainContainer(base, replicaMaster, master, "pytorch")
		if err != nil {
			return err
		}
		c.compareContainers(replicaMaster, m, main)
	}
	t.NumProcPerNode = c.nprocPerNode()
	tj.Spec.Trainer = t
	return nil
}

// nprocPerNode is spec.nprocPerNode as a number ("4" or 4); "auto", "gpu"
// and "cpu" have no numProcPerNode and are warned about.
func (c *conversion) nprocPerNode() *int32 {
	n := c.job.Spec.NprocPerNode
	if n == nil {
		return nil
	}
	if n.Type == intstr.Int {
		return ptr.To(n.IntVal)
	}
	if v, err := strconv.ParseInt(n.StrVal, 10, 32); err == nil {
		return ptr.To(int32(v))
	}
	c.warnf("spec.nprocPerNode %q is not carried over: numProcPerNode takes a number, and the runtime's default applies", n.StrVal)
	return nil
}

// mpi maps the Worker replicas onto numNodes nodes with the Worker's
// resources, and the Launcher's container to the trainer's command.
func (c *conversion) mpi(tj *trainer.TrainJob) error {
	specs := c.job.Spec.MPIReplicaSpecs
	base := "spec.mpiReplicaSpecs"
	c.unknownReplicas(base, specs, replicaLauncher, replicaWorker)
	launcher, worker := specs[replicaLauncher], specs[replicaWorker]
	if worker == nil {
		return fmt.Errorf("%s has no %s", base, replicaWorker)
	}
	name := ptr.Deref(c.job.Spec.MainContainer, "mpi")
	w, err := c.mainContainer(base, replicaWorker, worker, name)
	if err != nil {
		return err
	}
	t := trainerOf(w)
	t.NumNodes = ptr.To(replicas(worker))
	t.NumProcPerNode = c.job.Spec.SlotsPerWorker
	c.restartPolicy(base, replicaLauncher, launcher)
	c.restartPolicy(base, replicaWorker, worker)
	if launcher != nil {
		l, err := c.mainContainer(base, replicaLauncher, launcher, name)
		if err != nil {
			return err
		}
		if len(w.Command) > 0 || len(w.Args) > 0 {
			c.warnf("the %s command and args are not carried over: the runtime starts the workers, and the trainer runs the %s's command", replicaWorker, replicaLauncher)
		}
		t.Command, t.Args = l.Command, l.Args
		if l.Image != nil && ptr.Deref(l.Image, "") != ptr.Deref(w.Image, "") {
			c.warnf("the %s image %q is not carried over: every node runs the %s image %q", replicaLauncher, *l.Image, replicaWorker, ptr.Deref(w.Image, ""))
		}
		if l.Resources != nil {
			c.warnf("the %s resources are not carried over: resourcesPerNode comes from the %s", replicaLauncher, replicaWorker)
		}
		t.Env = c.mergeEnv(w.Env, l.Env)
		if r := ptr.Deref(launcher.Replicas, 1); r != 1 {
			c.warnf("%s.%s.replicas %d is not carried over: the runtime runs one launcher", base, replicaLauncher, r)
		}
	}
	tj.Spec.Trainer = t
	return nil
}

// trainerOf carries a container's image, command, args, env and resources.
func trainerOf(ctr *v1Container) *trainer.Trainer {
	return &trainer.Trainer{
		Image: ctr.Image, Command: ctr.Command, Args: ctr.Args, Env: ctr.Env, ResourcesPerNode: ctr.Resources,
	}
}

// replicas is a replica spec's count, 1 when unset as Training Operator
// defaults it, 0 when the replica type is absent.
func replicas(rs *v1ReplicaSpec) int32 {
	if rs == nil {
		return 0
	}
	return ptr.Deref(rs.Replicas, 1)
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

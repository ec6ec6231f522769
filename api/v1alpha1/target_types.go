package v1alpha1

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TargetType names the kind of execution system behind a Target.
// +kubebuilder:validation:Enum=Kubernetes;Slurm
type TargetType string

const (
	// TargetTypeKubernetes is a spoke Kubernetes cluster; jobs run as JobSets or LeaderWorkerSets.
	TargetTypeKubernetes TargetType = "Kubernetes"
	// TargetTypeSlurm is a Slurm cluster reached through slurmrestd.
	TargetTypeSlurm TargetType = "Slurm"
)

// KubernetesBackend names the workload API a Kubernetes spoke renders jobs into.
// +kubebuilder:validation:Enum=JobSet;LeaderWorkerSet
type KubernetesBackend string

const (
	KubernetesBackendJobSet          KubernetesBackend = "JobSet"
	KubernetesBackendLeaderWorkerSet KubernetesBackend = "LeaderWorkerSet"
)

// SlurmAPIVersion is a slurmrestd OpenAPI version trainyard can speak.
// +kubebuilder:validation:Enum=v0.0.41;v0.0.42
type SlurmAPIVersion string

const (
	SlurmAPIVersionV0041 SlurmAPIVersion = "v0.0.41"
	SlurmAPIVersionV0042 SlurmAPIVersion = "v0.0.42"
)

// Launcher is how a Slurm job starts the training processes inside its allocation.
// +kubebuilder:validation:Enum=Torchrun;MPI;Flux
type Launcher string

const (
	LauncherTorchrun Launcher = "Torchrun"
	LauncherMPI      Launcher = "MPI"
	LauncherFlux     Launcher = "Flux"
)

// ContainerRuntime is how a Slurm cluster runs the job's container image, if at all.
// +kubebuilder:validation:Enum=None;OCI;Pyxis;Apptainer
type ContainerRuntime string

const (
	// ContainerRuntimeNone runs the command on the bare nodes; the image is
	// not used.
	ContainerRuntimeNone ContainerRuntime = "None"
	// ContainerRuntimeOCI is Slurm's own container support (srun
	// --container, oci.conf) with an OCI runtime such as crun: the job
	// pulls the image with skopeo and unpacks it with umoci on the node.
	ContainerRuntimeOCI ContainerRuntime = "OCI"
	// ContainerRuntimePyxis is NVIDIA's Pyxis SPANK plugin with Enroot
	// (srun --container-image).
	ContainerRuntimePyxis ContainerRuntime = "Pyxis"
	// ContainerRuntimeApptainer runs each task under apptainer exec.
	ContainerRuntimeApptainer ContainerRuntime = "Apptainer"
)

// FlavorlessJobsPolicy says whether a target takes jobs admitted with no flavor.
// +kubebuilder:validation:Enum=Allow;Deny
type FlavorlessJobsPolicy string

const (
	FlavorlessJobsAllow FlavorlessJobsPolicy = "Allow"
	FlavorlessJobsDeny  FlavorlessJobsPolicy = "Deny"
)

// TargetImages lists the images a target runs, as patterns: an image
// reference as a job writes it (pytorch/pytorch:2.7.1, nvcr.io/nvidia/
// pytorch@sha256:...), in which * stands for any run of characters
// (nvcr.io/nvidia/*, pytorch/pytorch:2.*). A Docker Hub image matches a
// pattern written as the job writes it or fully qualified:
// docker.io/pytorch/pytorch:* matches both pytorch/pytorch:2.7.1 and
// docker.io/pytorch/pytorch:2.7.1. At most one of the lists applies, as
// the target runs containers or not.
type TargetImages struct {
	// allowed limits a target that runs containers (a Kubernetes spoke, a
	// Slurm cluster with a containerRuntime) to these images, for every
	// container of a job: a site that pulls only from its own registry
	// says so here, and jobs naming other images go elsewhere instead of
	// failing to pull. Empty: any image.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9._:/@+=*-]+$`
	Allowed []string `json:"allowed,omitempty"`

	// hostEnvironment are the images a Slurm cluster's own host
	// environment stands for, on a cluster that runs commands on the nodes
	// (containerRuntime None): for example the site's module environment
	// that provides what pytorch/pytorch:2.* holds. A job naming one of
	// them runs on the host without the image; a job naming any other is
	// not placed here, since its command would run without what its image
	// holds. Empty: only jobs that name no image run here. * stands for
	// every image, which runs any job on the host whatever it names.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9._:/@+=*-]+$`
	HostEnvironment []string `json:"hostEnvironment,omitempty"`
}

// RunsContainers reports whether s runs each job in its images: a
// Kubernetes spoke always, a Slurm cluster when it has a container runtime.
func (s *TargetSpec) RunsContainers() bool {
	switch s.Type {
	case TargetTypeKubernetes:
		return true
	case TargetTypeSlurm:
		return s.Slurm != nil && s.Slurm.ContainerRuntime != "" && s.Slurm.ContainerRuntime != ContainerRuntimeNone
	}
	return false
}

// LeaseLossPolicy says what the hub does with a target's running jobs once
// its agent's lease has not been renewed for lease duration plus grace.
// +kubebuilder:validation:Enum=Requeue;Hold
type LeaseLossPolicy string

const (
	// LeaseLossRequeue requeues the jobs elsewhere. An agent that is alive
	// but cut off has stopped them by then; one that died has not.
	LeaseLossRequeue LeaseLossPolicy = "Requeue"
	// LeaseLossHold keeps the jobs, and their quota, until the agent
	// returns and reports them or an operator sets outOfService.
	LeaseLossHold LeaseLossPolicy = "Hold"
)

// TargetSpec describes an execution system the hub may dispatch to.
//
// +kubebuilder:validation:XValidation:rule="self.type != 'Kubernetes' || (has(self.kubernetes) && !has(self.slurm))",message="a Kubernetes target sets spec.kubernetes and not spec.slurm"
// +kubebuilder:validation:XValidation:rule="self.type != 'Slurm' || (has(self.slurm) && !has(self.kubernetes))",message="a Slurm target sets spec.slurm and not spec.kubernetes"
// +kubebuilder:validation:XValidation:rule="!has(self.slurm) || self.slurm.partitions.all(p, p.flavor in self.flavors)",message="every spec.slurm.partitions[].flavor must be listed in spec.flavors"
// +kubebuilder:validation:XValidation:rule="!has(self.images) || !has(self.images.allowed) || self.type == 'Kubernetes' || (has(self.slurm) && has(self.slurm.containerRuntime) && self.slurm.containerRuntime != 'None')",message="spec.images.allowed limits targets that run containers; a Slurm target with containerRuntime None runs no image: list the images its host stands for in spec.images.hostEnvironment"
// +kubebuilder:validation:XValidation:rule="!has(self.images) || !has(self.images.hostEnvironment) || (self.type == 'Slurm' && has(self.slurm) && (!has(self.slurm.containerRuntime) || self.slurm.containerRuntime == 'None'))",message="spec.images.hostEnvironment is for Slurm targets that run commands on the host (containerRuntime None); where jobs run in their images, limit them with spec.images.allowed"
type TargetSpec struct {
	// type is the kind of execution system. It cannot change: a different
	// system is a different Target.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="type is immutable"
	Type TargetType `json:"type"`

	// flavors are the Kueue ResourceFlavors whose quota this target serves. A
	// Workload admitted with one of them may be dispatched here.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Flavors []string `json:"flavors"`

	// agent identifies the agent that serves this target. Its Dispatches are
	// written into agent.namespace on the hub, the only namespace the agent's
	// credentials can read.
	// +required
	Agent AgentIdentity `json:"agent"`

	// paused stops new dispatches to this target; running work is left alone.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// leaseLoss says what the hub does with this target's running jobs once
	// its agent's lease has not been renewed for the lease duration plus the
	// grace. Requeue (the default) requeues them elsewhere: an agent that is
	// alive but cut off has stopped them by then. An agent that died, or
	// cannot reach its own cluster, stops nothing, so the first copy may
	// still run; run two agent replicas where you choose Requeue. Hold keeps
	// the jobs and their quota until the agent returns and reports what
	// became of them, or an operator sets outOfService: no job ever runs
	// twice, at the price of waiting for a person when a cluster is lost.
	// +optional
	// +kubebuilder:default=Requeue
	LeaseLoss LeaseLossPolicy `json:"leaseLoss,omitempty"`

	// outOfService is an operator's word that nothing of this target runs
	// any more: the cluster is down, or its jobs were cancelled by hand. Once
	// the agent's lease has not been renewed for the lease duration, the hub
	// requeues the target's jobs at once, without the grace and even in
	// disruption mode, and places nothing new here. While the agent still
	// renews its lease it is ignored for running jobs (pause the target or
	// delete it to drain). Unset it when the cluster is back.
	// +optional
	OutOfService bool `json:"outOfService,omitempty"`

	// flavorlessJobs says whether jobs Kueue admitted with no flavor (their
	// resources are not covered by any ResourceFlavor of the ClusterQueue,
	// typically CPU-only jobs) may run here. Allow (the default) places them
	// on any eligible target with room for their CPU and memory that serves
	// one of the flavors of the ClusterQueue that admitted them (any, when
	// that queue has no flavors at all), so a queue's jobs stay on the
	// targets its quota is for; Deny keeps this target for jobs admitted
	// with one of its flavors.
	// +optional
	// +kubebuilder:default=Allow
	FlavorlessJobs FlavorlessJobsPolicy `json:"flavorlessJobs,omitempty"`

	// images says which container images jobs may name here: the trainer's
	// (spec.trainer.image, else the runtime's trainer container) and, where
	// they run, the initializers' and every other container's. A job naming
	// an image this target cannot run is not placed here, and when no
	// target can run it the placement message names the image and the
	// target: a job is never started without the image it asked for.
	// Unset: a target that runs containers (a Kubernetes spoke, a Slurm
	// cluster with a containerRuntime) runs any image; a Slurm cluster that
	// runs commands on the host runs only jobs that name no image.
	// +optional
	Images *TargetImages `json:"images,omitempty"`

	// kubernetes configures a Kubernetes spoke. Required when type is Kubernetes.
	// +optional
	Kubernetes *KubernetesTarget `json:"kubernetes,omitempty"`

	// slurm configures a Slurm cluster. Required when type is Slurm.
	// +optional
	Slurm *SlurmTarget `json:"slurm,omitempty"`
}

// AgentIdentity names the agent of a target on the hub.
type AgentIdentity struct {
	// namespace on the hub that holds this target's Dispatches.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`

	// serviceAccountName is the hub ServiceAccount the agent authenticates as.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
}

// KubernetesTarget configures a spoke Kubernetes cluster.
type KubernetesTarget struct {
	// backend is the workload API jobs are rendered into on the spoke.
	// +optional
	// +kubebuilder:default=JobSet
	Backend KubernetesBackend `json:"backend,omitempty"`

	// namespace is the prefix of the spoke namespaces jobs run in: each hub
	// namespace (tenant) gets its own, <namespace>-<hub namespace>, made by
	// the agent with Pod Security labels and a default-deny NetworkPolicy.
	// A name that would pass 63 characters keeps the prefix and ends in a
	// hash of the hub namespace.
	// +optional
	// +kubebuilder:default=trainyard-jobs
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace,omitempty"`

	// podSecurity is the Pod Security Standard the tenant namespaces
	// enforce and every rendered pod is checked against before placement.
	// Baseline (the default) runs Kubeflow's shipped runtimes, whose images
	// run as root; Restricted needs runtimes that run as non-root with a
	// seccomp profile and no capabilities; Privileged lifts the standard,
	// leaving allowedPodFields as the only limit.
	// +optional
	// +kubebuilder:default=Baseline
	PodSecurity PodSecurityLevel `json:"podSecurity,omitempty"`

	// allowedPodFields are the pod-spec fields tenants may set through
	// runtimes or runtime patches. Anything not listed is refused, and the
	// job is not placed on this target.
	// +optional
	AllowedPodFields *AllowedPodFields `json:"allowedPodFields,omitempty"`

	// networkPolicy is what tenant pods may reach beyond their own job's
	// pods and DNS (default: nothing).
	// +optional
	NetworkPolicy *TenantNetworkPolicy `json:"networkPolicy,omitempty"`

	// topologyLevels are node label keys from the widest domain to the
	// narrowest (for example block, rack, hostname). The agent publishes free
	// capacity per domain of these levels.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=317
	TopologyLevels []string `json:"topologyLevels,omitempty"`

	// queueDepth is how many jobs of one pod the hub keeps, at least, in
	// the spoke's own scheduler queue beyond what its nodes have free: the
	// scheduler then binds the next pod the moment one ends, instead of
	// waiting for the agent's status write and the hub's next decision.
	// When more jobs started there within twice the time the hub takes to
	// refill the queue (as it measures it), the hub keeps that many
	// instead, up to the spoke's GPUs: the most of the last 5 minutes,
	// until none of its jobs is left there. Jobs of several pods never
	// wait on the spoke (its scheduler binds pods one at a time, and two
	// half-bound jobs would hold each other's GPUs), nor do jobs bound to
	// one topology domain; they and the jobs beyond the depth wait on the
	// hub, where Kueue's order and every other target still apply. 0 sends
	// only jobs that fit now.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	QueueDepth *int32 `json:"queueDepth,omitempty"`
}

// DefaultKubernetesQueueDepth is spec.kubernetes.queueDepth when unset:
// one job waiting on the spoke is enough to bind a freed GPU at once; the
// hub deepens it while short jobs turn over faster than it refills.
const DefaultKubernetesQueueDepth int32 = 1

// PodSecurityLevel is a Pod Security Standard level.
// +kubebuilder:validation:Enum=Restricted;Baseline;Privileged
type PodSecurityLevel string

const (
	PodSecurityRestricted PodSecurityLevel = "Restricted"
	PodSecurityBaseline   PodSecurityLevel = "Baseline"
	PodSecurityPrivileged PodSecurityLevel = "Privileged"
)

// AllowedPodFields lists the pod-spec fields a Kubernetes target lets
// tenants set. The zero value allows none of them.
type AllowedPodFields struct {
	// volumeTypes are volume sources allowed beyond configMap, secret (both
	// only the job's own), emptyDir, persistentVolumeClaim, projected,
	// downwardAPI, ephemeral, csi and image, for example hostPath or nfs.
	// hostPath also needs podSecurity Privileged.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:Pattern=`^[a-z][a-zA-Z0-9]*$`
	VolumeTypes []string `json:"volumeTypes,omitempty"`

	// privileged allows privileged containers (needs podSecurity Privileged).
	// +optional
	Privileged bool `json:"privileged,omitempty"`

	// allowPrivilegeEscalation allows containers that set it to true.
	// +optional
	AllowPrivilegeEscalation bool `json:"allowPrivilegeEscalation,omitempty"`

	// capabilities are the Linux capabilities containers may add, without
	// the CAP_ prefix (for example NET_ADMIN, IPC_LOCK).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:Pattern=`^[A-Z][A-Z0-9_]*$`
	Capabilities []string `json:"capabilities,omitempty"`

	// hostNetwork, hostPID and hostIPC allow the host's namespaces (they
	// need podSecurity Privileged).
	// +optional
	HostNetwork bool `json:"hostNetwork,omitempty"`
	// +optional
	HostPID bool `json:"hostPID,omitempty"`
	// +optional
	HostIPC bool `json:"hostIPC,omitempty"`

	// serviceAccountNames are the spoke ServiceAccounts, besides default,
	// pods may run as (for example kubeflow-trainer-cache-initializer,
	// which Kubeflow's torch-distributed-with-cache runtime names). The
	// administrator creates them in the tenant namespaces.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ServiceAccountNames []string `json:"serviceAccountNames,omitempty"`

	// maxTerminationGracePeriodSeconds is the longest termination grace a
	// tenant's pods may ask for (terminationGracePeriodSeconds) through
	// runtimes or runtime patches; a pod asking for more is refused, and
	// the job is not placed on this target. The agent waits this long for
	// pods to end after a stop, and the hub waits this long more before it
	// requeues the jobs of a target whose agent went silent, so a longer
	// grace delays every such requeue. Default 30, Kubernetes' own default
	// grace; a pod that sets none gets the lesser of 30 and this cap.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	MaxTerminationGracePeriodSeconds *int64 `json:"maxTerminationGracePeriodSeconds,omitempty"`

	// tolerationKeys are the taint keys tenants' pods may tolerate (for
	// example the key of a taint that keeps other work off the target's
	// GPU nodes). A toleration of any other key is refused, and so is one
	// without a key, which tolerates every taint. Default: none, so no
	// tenant pod lands on a node tainted against it: the control plane's
	// (node-role.kubernetes.io/control-plane), or nodes an administrator
	// reserved with a taint. The node lifecycle taints (node.kubernetes.io/,
	// such as unreachable or unschedulable) cannot be listed: tolerating
	// them keeps pods on cordoned or dead nodes.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=317
	// +kubebuilder:validation:items:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('node.kubernetes.io/'))",message="tolerationKeys cannot list node.kubernetes.io/ taints: Kubernetes sets them on nodes that are NotReady, unreachable, cordoned or under pressure"
	TolerationKeys []string `json:"tolerationKeys,omitempty"`

	// nodeSelectorKeys are the node label keys tenants' pods may select
	// nodes by, in nodeSelector and in node affinity (for example a site's
	// GPU model label). Any other key is refused: a selector no node
	// matches keeps pods Pending while the job's quota stays held on the
	// hub. Default: none. The topology levels trainyard pins jobs to are
	// not the tenant's and need no listing.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=317
	// +kubebuilder:validation:items:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	NodeSelectorKeys []string `json:"nodeSelectorKeys,omitempty"`

	// affinity allows pods' affinity: pod affinity and anti-affinity, and
	// node affinity on nodeSelectorKeys only (matchFields, which names
	// nodes, is refused). Default false: pods that set affinity are refused.
	// +optional
	Affinity bool `json:"affinity,omitempty"`

	// schedulingGates are the scheduling gates tenants' pods may carry, by
	// name: only gates a controller on the spoke removes, since a pod keeps
	// its gates Pending forever otherwise while the job's quota stays held
	// on the hub. Default: none.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=317
	// +kubebuilder:validation:items:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	SchedulingGates []string `json:"schedulingGates,omitempty"`

	// priorityClassNames are the spoke PriorityClasses tenants' pods may
	// name. Any other is refused: a higher class would preempt other
	// tenants' pods on the spoke, which the hub's quota never agreed to.
	// Default: none, so pods run at the spoke's default priority.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	PriorityClassNames []string `json:"priorityClassNames,omitempty"`

	// runtimeClassNames are the RuntimeClasses tenants' pods may run under
	// (for example a GPU runtime, or a sandboxed one). Any other is
	// refused: a RuntimeClass picks the container runtime, and so how far
	// a pod is isolated from its node. Default: none, the nodes' default
	// runtime.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	RuntimeClassNames []string `json:"runtimeClassNames,omitempty"`
}

// DefaultMaxTerminationGracePeriodSeconds is
// allowedPodFields.maxTerminationGracePeriodSeconds when unset: the grace
// Kubernetes gives a pod that sets none.
const DefaultMaxTerminationGracePeriodSeconds int64 = 30

// MaxTerminationGrace is a's cap on pods' terminationGracePeriodSeconds,
// its default when a is nil or leaves it unset.
func (a *AllowedPodFields) MaxTerminationGrace() int64 {
	if a == nil || a.MaxTerminationGracePeriodSeconds == nil {
		return DefaultMaxTerminationGracePeriodSeconds
	}
	return *a.MaxTerminationGracePeriodSeconds
}

// SlurmTarget configures a Slurm cluster reached through slurmrestd.
type SlurmTarget struct {
	// endpoint is the slurmrestd base URL, as seen from the agent.
	// +required
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && (url(self).getScheme() == 'http' || url(self).getScheme() == 'https')",message="endpoint must be an http or https URL"
	Endpoint string `json:"endpoint"`

	// apiVersion is the slurmrestd OpenAPI version to use.
	// +optional
	// +kubebuilder:default="v0.0.41"
	APIVersion SlurmAPIVersion `json:"apiVersion,omitempty"`

	// partitions map each Kueue flavor this cluster serves to a partition.
	// +required
	// +listType=map
	// +listMapKey=flavor
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	Partitions []SlurmPartition `json:"partitions"`

	// accounts map hub namespaces to the Slurm identity their jobs run as.
	// Only an administrator sets these: a tenant cannot choose the Unix user,
	// account or QOS of its jobs. A namespace not listed cannot use this target.
	// +optional
	// +listType=map
	// +listMapKey=namespace
	// +kubebuilder:validation:MaxItems=256
	Accounts []SlurmAccount `json:"accounts,omitempty"`

	// defaultLauncher is used when the job's runtime does not name one.
	// +optional
	// +kubebuilder:default=Torchrun
	DefaultLauncher Launcher `json:"defaultLauncher,omitempty"`

	// launchers are the launchers the cluster's nodes can run: torchrun
	// needs nothing beyond the job's command, MPI needs srun's PMIx plugin
	// or the job's mpirun, Flux needs flux-core on every node. A job whose
	// runtime needs a launcher not listed is not placed here. Empty means
	// Torchrun and MPI.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=3
	Launchers []Launcher `json:"launchers,omitempty"`

	// containerRuntime is how this cluster runs the job's image: None runs
	// the command on the bare nodes, OCI with Slurm's own container support
	// (srun --container and an oci.conf on the nodes), Pyxis with srun
	// --container-image, Apptainer with apptainer exec. Every task of a job
	// runs in the image; the work directory and containerMounts are bound
	// into it. See the operator guide for what each needs on the nodes.
	// +optional
	// +kubebuilder:default=None
	ContainerRuntime ContainerRuntime `json:"containerRuntime,omitempty"`

	// containerMounts are host directories the administrator binds into
	// every container this cluster runs (datasets, scratch), besides the
	// work directory. Tenants cannot add any.
	// +optional
	// +listType=map
	// +listMapKey=destination
	// +kubebuilder:validation:MaxItems=16
	ContainerMounts []SlurmContainerMount `json:"containerMounts,omitempty"`

	// auth says how the agent authenticates to slurmrestd. The credential
	// itself is never in the Target.
	// +optional
	Auth *SlurmAuth `json:"auth,omitempty"`

	// topologyFile is the path, on the agent's host, of the cluster's
	// topology.conf (topology/tree switches or topology/block blocks), from
	// which the agent publishes the topology: slurmrestd 24.11 does not
	// serve it. Empty: no topology beyond nodes.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/')",message="topologyFile must be an absolute path"
	TopologyFile string `json:"topologyFile,omitempty"`

	// workDir is the directory each job runs in and writes its output to,
	// on the cluster's shared filesystem: an absolute path in which %u
	// stands for the job's mapped Unix user, for example
	// /scratch/%u/trainyard. It is always the user's own: without %u the
	// user's name is appended, and empty means /home/%u/.trainyard, never
	// a shared name in /tmp. When the agent does not see it, a job it
	// submits as the user makes it (mode 0700) before the first job starts;
	// the administrator may create it instead, owned by the user. Each job
	// makes it private (mode 0700), its output files 0600, and keeps its
	// private files (the MPI hostfile) in a 0700 directory inside it.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/')",message="workDir must be an absolute path"
	// +kubebuilder:validation:XValidation:rule="!self.split('/').exists(s, s == '..' || s == '.')",message="workDir must not contain . or .. segments"
	// +kubebuilder:validation:XValidation:rule="self.matches('^(/([A-Za-z0-9._+-]|%u)+)+/?$')",message="workDir may hold letters, digits, . _ + - and the %u placeholder, in non-empty segments"
	WorkDir string `json:"workDir,omitempty"`

	// outputRetentionDays is how long a job's output files and private
	// directory are kept in the work directory: every job of a user on
	// this target first removes that user's trainyard output older than
	// this many days. `trainyard logs` reads a job's output for as long
	// after the job ended, also once slurmctld has forgotten the job, and
	// then answers that the logs were kept for this many days. 0 keeps
	// output until someone removes it.
	// +optional
	// +kubebuilder:default=7
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3650
	OutputRetentionDays *int32 `json:"outputRetentionDays,omitempty"`

	// queueDepth is how many jobs the hub keeps, at least, in this
	// cluster's own queue beyond what its nodes have free: slurmctld then
	// starts the next job the moment one ends, and its backfill scheduler
	// has jobs to choose from, instead of waiting for the agent's next
	// poll and the hub's next decision. When more jobs started there
	// within twice the time the hub takes to refill the queue (as it
	// measures it), the hub keeps that many instead, up to the cluster's
	// GPUs: the most of the last 5 minutes, until none of its jobs is left
	// there (jobs that started together end together). Jobs beyond it
	// wait on the hub, where Kueue's order and every other target still
	// apply. Jobs bound to one topology domain (a required level) never
	// wait in Slurm's queue. 0 sends only jobs that fit now.
	// +optional
	// +kubebuilder:default=8
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	QueueDepth *int32 `json:"queueDepth,omitempty"`

	// killWaitSeconds is Slurm's KillWait on this cluster: the seconds
	// between the SIGTERM and the SIGKILL of a cancelled job. The hub waits
	// this long more before it requeues the jobs of a target whose agent
	// went silent, so a requeued copy never runs beside the old one's last
	// moments. Default 30, Slurm's default; set it to the cluster's value
	// (scontrol show config | grep KillWait).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	KillWaitSeconds *int32 `json:"killWaitSeconds,omitempty"`
}

// DefaultSlurmQueueDepth is spec.slurm.queueDepth when unset; see the
// operator guide (docs/operator-guide.md) for the measurement behind it.
const DefaultSlurmQueueDepth int32 = 8

// DefaultSlurmOutputRetentionDays is spec.slurm.outputRetentionDays when
// unset (the API server defaults it too).
const DefaultSlurmOutputRetentionDays int32 = 7

// RetentionDays is s's outputRetentionDays, its default when s is nil or
// leaves it unset; 0 keeps output for ever.
func (s *SlurmTarget) RetentionDays() int32 {
	if s == nil || s.OutputRetentionDays == nil {
		return DefaultSlurmOutputRetentionDays
	}
	return *s.OutputRetentionDays
}

// DefaultSlurmKillWaitSeconds is spec.slurm.killWaitSeconds when unset:
// Slurm's own default KillWait.
const DefaultSlurmKillWaitSeconds int32 = 30

// KillWait is s's killWaitSeconds, its default when s is nil or leaves it
// unset.
func (s *SlurmTarget) KillWait() int32 {
	if s == nil || s.KillWaitSeconds == nil {
		return DefaultSlurmKillWaitSeconds
	}
	return *s.KillWaitSeconds
}

// Serves reports whether t takes jobs admitted with these flavors from a
// ClusterQueue whose flavors are queueFlavors: all of the admitted flavors
// when there are any. A flavor-less job (its resources are covered by no
// flavor of its queue) stays within its queue: t takes it unless t denies
// flavor-less jobs, and only when t serves one of queueFlavors or the
// queue has none. It is placement's rule; the hub's gauges count the
// waiting by it too.
func (t *Target) Serves(flavors, queueFlavors []string) bool {
	if len(flavors) == 0 {
		if t.Spec.FlavorlessJobs == FlavorlessJobsDeny {
			return false
		}
		return len(queueFlavors) == 0 || slices.ContainsFunc(queueFlavors, func(f string) bool {
			return slices.Contains(t.Spec.Flavors, f)
		})
	}
	for _, f := range flavors {
		if !slices.Contains(t.Spec.Flavors, f) {
			return false
		}
	}
	return true
}

// QueueDepth is t's spec.slurm.queueDepth or spec.kubernetes.queueDepth,
// its default when unset, and 0 for a target of neither kind.
func (t *Target) QueueDepth() int32 {
	var depth *int32
	def := int32(0)
	switch {
	case t.Spec.Type == TargetTypeSlurm && t.Spec.Slurm != nil:
		depth, def = t.Spec.Slurm.QueueDepth, DefaultSlurmQueueDepth
	case t.Spec.Type == TargetTypeKubernetes:
		def = DefaultKubernetesQueueDepth
		if t.Spec.Kubernetes != nil {
			depth = t.Spec.Kubernetes.QueueDepth
		}
	}
	if depth == nil {
		return def
	}
	return *depth
}

// SlurmAuthType is the kind of credential an agent holds for slurmrestd.
// +kubebuilder:validation:Enum=SigningKey;Token
type SlurmAuthType string

const (
	// SlurmAuthSigningKey: the agent holds the cluster's JWT HS256 key
	// (slurm.conf AuthAltParameters jwt_key) and mints a short-lived token
	// for each mapped user, renewed before it expires.
	SlurmAuthSigningKey SlurmAuthType = "SigningKey"
	// SlurmAuthToken: the agent holds a JWT of a user Slurm lets act for
	// others (SlurmUser or root), re-read whenever it rotates; each request
	// names the mapped user in X-SLURM-USER-NAME.
	SlurmAuthToken SlurmAuthType = "Token"
)

// SlurmAuth locates the agent's slurmrestd credential.
// +kubebuilder:validation:XValidation:rule="has(self.secretRef) != has(self.file)",message="set exactly one of secretRef and file"
type SlurmAuth struct {
	// type of the credential.
	// +required
	Type SlurmAuthType `json:"type"`

	// secretRef is a key of a Secret in the target's agent namespace on
	// the hub. The agent may read only this Secret.
	// +optional
	SecretRef *SecretKeyRef `json:"secretRef,omitempty"`

	// file is a path on the agent's host (for example a Secret mounted into
	// the agent's pod). It is re-read when it changes.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/')",message="file must be an absolute path"
	File string `json:"file,omitempty"`

	// tokenLifetime of minted tokens (SigningKey only). Tokens are renewed
	// at half their lifetime.
	// +optional
	// +kubebuilder:default="15m"
	TokenLifetime *metav1.Duration `json:"tokenLifetime,omitempty"`
}

// SecretKeyRef names one key of a Secret in a known namespace.
type SecretKeyRef struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// key in the Secret's data.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`
}

// SlurmContainerMount binds a host directory into a job's container.
// Paths are absolute and hold letters, digits and . _ + - only, so they
// need no quoting in any runtime's mount syntax.
type SlurmContainerMount struct {
	// source is the directory on the nodes.
	// +required
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^(/[A-Za-z0-9._+-]+)+$`
	// +kubebuilder:validation:XValidation:rule="!self.split('/').exists(s, s == '..' || s == '.')",message="source must not contain . or .. segments"
	Source string `json:"source"`

	// destination is where it appears in the container.
	// +required
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^(/[A-Za-z0-9._+-]+)+$`
	// +kubebuilder:validation:XValidation:rule="!self.split('/').exists(s, s == '..' || s == '.')",message="destination must not contain . or .. segments"
	Destination string `json:"destination"`

	// readOnly binds it read-only.
	// +optional
	ReadOnly bool `json:"readOnly,omitempty"`
}

// SlurmPartition maps one Kueue flavor to a Slurm partition.
type SlurmPartition struct {
	// flavor is a Kueue ResourceFlavor name listed in spec.flavors.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Flavor string `json:"flavor"`

	// partition is the Slurm partition jobs of this flavor are submitted to.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.-]+$`
	Partition string `json:"partition"`
}

// SlurmAccount is the Slurm identity jobs of one hub namespace run as.
type SlurmAccount struct {
	// namespace on the hub whose TrainJobs use this identity.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`

	// user is the Unix user the jobs run as.
	// +required
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_-]{0,31}$`
	User string `json:"user"`

	// account is the Slurm account charged.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.-]*$`
	Account string `json:"account,omitempty"`

	// qos is the Slurm QOS the jobs run under.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.-]*$`
	QOS string `json:"qos,omitempty"`
}

// TargetStatus is written by the target's agent (heartbeat, capacity,
// topology) and by the hub (conditions derived from them).
type TargetStatus struct {
	// conditions: Available (heartbeat fresh and backend reachable) and
	// BackendReachable.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the spec generation the agent last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// lastHeartbeatTime is when the agent last reported.
	// +optional
	LastHeartbeatTime *metav1.Time `json:"lastHeartbeatTime,omitempty"`

	// capacityReading numbers the agent's capacity readings: capacity,
	// free and topology are those of reading N. A Dispatch whose work the
	// agent saw running records the first reading that counts it
	// (Dispatch status.countedFromReading), so the hub knows when this
	// status already holds that work without comparing clocks.
	// +optional
	// +kubebuilder:validation:Minimum=0
	CapacityReading int64 `json:"capacityReading,omitempty"`

	// hubID identifies the hub that manages this target (the UID of the
	// hub's kube-system namespace), written by the hub. An agent fences
	// remote work only against the hub identity it first saw.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	HubID string `json:"hubID,omitempty"`

	// agentVersion is the version of the agent that wrote the heartbeat.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	AgentVersion string `json:"agentVersion,omitempty"`

	// capacity is the target's allocatable resources in total.
	// +optional
	Capacity corev1.ResourceList `json:"capacity,omitempty"`

	// free is what is allocatable and not in use.
	// +optional
	Free corev1.ResourceList `json:"free,omitempty"`

	// freeGPUs is free["nvidia.com/gpu"], kept apart for printer columns.
	// +optional
	FreeGPUs int64 `json:"freeGPUs,omitempty"`

	// maxGPUsPerNode is the largest node's allocatable GPUs: a pod asking
	// for more can never run on this target.
	// +optional
	MaxGPUsPerNode int64 `json:"maxGPUsPerNode,omitempty"`

	// topology is the target's topology tree with free GPUs per domain.
	// +optional
	Topology *TopologyStatus `json:"topology,omitempty"`
}

// TopologyStatus describes a target's topology: ordered levels and, for each
// lowest-level domain above the node, its nodes' free GPUs.
type TopologyStatus struct {
	// levels from widest to narrowest; the last is the node level.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=317
	Levels []string `json:"levels"`

	// domains are the leaf domains just above the node level.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100000
	Domains []TopologyDomain `json:"domains,omitempty"`
}

// TopologyDomain is one leaf domain of a target's topology.
type TopologyDomain struct {
	// values of the domain at each level above the node level, widest first.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=7
	// +kubebuilder:validation:items:MaxLength=253
	Values []string `json:"values"`

	// nodes are the node names in this domain, in the order of freeGPUsPerNode.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4096
	// +kubebuilder:validation:items:MaxLength=253
	Nodes []string `json:"nodes,omitempty"`

	// freeGPUsPerNode gives each node's free GPUs.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4096
	FreeGPUsPerNode []int32 `json:"freeGPUsPerNode,omitempty"`
}

// Target is an execution system (a Kubernetes spoke or a Slurm cluster)
// that the hub dispatches admitted TrainJobs to.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=tyt
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Available",type=string,JSONPath=`.status.conditions[?(@.type=="Available")].status`
// +kubebuilder:printcolumn:name="Free GPUs",type=integer,JSONPath=`.status.freeGPUs`
// +kubebuilder:printcolumn:name="Heartbeat",type=date,JSONPath=`.status.lastHeartbeatTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Target struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec TargetSpec `json:"spec"`
	// +optional
	Status TargetStatus `json:"status,omitempty"`
}

// TargetList is a list of Targets.
// +kubebuilder:object:root=true
type TargetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Target `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Target{}, &TargetList{})
}

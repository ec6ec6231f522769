// Package testing holds builders of test objects, in the style of Kueue's
// and JobSet's wrappers: MakeX(name, ...) with defaults that pass validation,
// chainable setters, Obj() and Clone().
package testing

import (
	"fmt"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// TargetWrapper builds a Target.
type TargetWrapper struct{ v1alpha1.Target }

// MakeKubernetesTarget returns a valid Kubernetes spoke target serving flavor.
func MakeKubernetesTarget(name, flavor string) *TargetWrapper {
	return &TargetWrapper{v1alpha1.Target{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.TargetSpec{
			Type:       v1alpha1.TargetTypeKubernetes,
			Flavors:    []string{flavor},
			Agent:      v1alpha1.AgentIdentity{Namespace: "trainyard-" + name},
			Kubernetes: &v1alpha1.KubernetesTarget{},
		},
	}}
}

// MakeSlurmTarget returns a valid Slurm target serving flavor from partition.
func MakeSlurmTarget(name, flavor, partition string) *TargetWrapper {
	return &TargetWrapper{v1alpha1.Target{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.TargetSpec{
			Type:    v1alpha1.TargetTypeSlurm,
			Flavors: []string{flavor},
			Agent:   v1alpha1.AgentIdentity{Namespace: "trainyard-" + name},
			Slurm: &v1alpha1.SlurmTarget{
				Endpoint:   "http://127.0.0.1:6820",
				Partitions: []v1alpha1.SlurmPartition{{Flavor: flavor, Partition: partition}},
			},
		},
	}}
}

// Obj returns the built object.
func (w *TargetWrapper) Obj() *v1alpha1.Target { return &w.Target }

// Clone returns a deep copy of the wrapper.
func (w *TargetWrapper) Clone() *TargetWrapper { return &TargetWrapper{*w.DeepCopy()} }

// Flavors replaces the served flavors.
func (w *TargetWrapper) Flavors(f ...string) *TargetWrapper { w.Spec.Flavors = f; return w }

// Type sets spec.type only, leaving the per-type blocks as they are.
func (w *TargetWrapper) Type(t v1alpha1.TargetType) *TargetWrapper { w.Spec.Type = t; return w }

// AgentNamespace sets the agent's hub namespace.
func (w *TargetWrapper) AgentNamespace(ns string) *TargetWrapper {
	w.Spec.Agent.Namespace = ns
	return w
}

// Kubernetes sets the Kubernetes block.
func (w *TargetWrapper) Kubernetes(k *v1alpha1.KubernetesTarget) *TargetWrapper {
	w.Spec.Kubernetes = k
	return w
}

// Slurm sets the Slurm block.
func (w *TargetWrapper) Slurm(s *v1alpha1.SlurmTarget) *TargetWrapper { w.Spec.Slurm = s; return w }

// SlurmEndpoint sets the slurmrestd URL.
func (w *TargetWrapper) SlurmEndpoint(u string) *TargetWrapper { w.Spec.Slurm.Endpoint = u; return w }

// SlurmPartition adds a flavor-to-partition mapping.
func (w *TargetWrapper) SlurmPartition(flavor, partition string) *TargetWrapper {
	w.Spec.Slurm.Partitions = append(w.Spec.Slurm.Partitions, v1alpha1.SlurmPartition{Flavor: flavor, Partition: partition})
	return w
}

// SlurmAccount adds a namespace-to-identity mapping.
func (w *TargetWrapper) SlurmAccount(a v1alpha1.SlurmAccount) *TargetWrapper {
	w.Spec.Slurm.Accounts = append(w.Spec.Slurm.Accounts, a)
	return w
}

// SlurmAuth sets how the agent authenticates to slurmrestd.
func (w *TargetWrapper) SlurmAuth(a *v1alpha1.SlurmAuth) *TargetWrapper {
	w.Spec.Slurm.Auth = a
	return w
}

// SlurmTopologyFile sets the topology.conf the agent publishes.
func (w *TargetWrapper) SlurmTopologyFile(path string) *TargetWrapper {
	w.Spec.Slurm.TopologyFile = path
	return w
}

// KubernetesQueueDepth sets spec.kubernetes.queueDepth.
func (w *TargetWrapper) KubernetesQueueDepth(n int32) *TargetWrapper {
	if w.Spec.Kubernetes == nil {
		w.Spec.Kubernetes = &v1alpha1.KubernetesTarget{}
	}
	w.Spec.Kubernetes.QueueDepth = &n
	return w
}

// SlurmQueueDepth sets spec.slurm.queueDepth.
func (w *TargetWrapper) SlurmQueueDepth(n int32) *TargetWrapper {
	w.Spec.Slurm.QueueDepth = &n
	return w
}

// SlurmKillWait sets spec.slurm.killWaitSeconds.
func (w *TargetWrapper) SlurmKillWait(seconds int32) *TargetWrapper {
	w.Spec.Slurm.KillWaitSeconds = &seconds
	return w
}

// SlurmAPIVersion sets the slurmrestd API version.
func (w *TargetWrapper) SlurmAPIVersion(v v1alpha1.SlurmAPIVersion) *TargetWrapper {
	w.Spec.Slurm.APIVersion = v
	return w
}

// DispatchWrapper builds a Dispatch.
type DispatchWrapper struct{ v1alpha1.Dispatch }

// MakeDispatch returns a valid first-attempt Dispatch of workload wl to target.
func MakeDispatch(name, namespace, target string) *DispatchWrapper {
	return &DispatchWrapper{v1alpha1.Dispatch{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: v1alpha1.DispatchSpec{
			Workload:   v1alpha1.WorkloadReference{Namespace: "team-a", Name: "wl-" + name, UID: types.UID("uid-" + name)},
			TargetName: target,
			Attempt:    1,
			PodSets:    []v1alpha1.PodSetPlacement{{Name: "node", Count: 2}},
			Runtime: v1alpha1.RuntimeSnapshot{
				Kind: v1alpha1.RuntimeKindClusterTrainingRuntime, Name: "torch-distributed",
				Hash: "sha256:" + "0000000000000000000000000000000000000000000000000000000000000000",
				Spec: runtime.RawExtension{Raw: []byte(`{"template":{}}`)},
			},
			TrainJob: v1alpha1.TrainJobSnapshot{Name: "tj-" + name, UID: types.UID("tj-uid-" + name),
				Spec: runtime.RawExtension{Raw: []byte(`{"runtimeRef":{"name":"torch-distributed"}}`)}},
		},
	}}
}

// Obj returns the built object.
func (w *DispatchWrapper) Obj() *v1alpha1.Dispatch { return &w.Dispatch }

// Clone returns a deep copy of the wrapper.
func (w *DispatchWrapper) Clone() *DispatchWrapper { return &DispatchWrapper{*w.DeepCopy()} }

// Attempt sets the attempt number.
func (w *DispatchWrapper) Attempt(a int32) *DispatchWrapper { w.Spec.Attempt = a; return w }

// Target sets the target name.
func (w *DispatchWrapper) Target(t string) *DispatchWrapper { w.Spec.TargetName = t; return w }

// PodSets replaces the pod sets.
func (w *DispatchWrapper) PodSets(ps ...v1alpha1.PodSetPlacement) *DispatchWrapper {
	w.Spec.PodSets = ps
	return w
}

// RuntimeHash sets the snapshot hash.
func (w *DispatchWrapper) RuntimeHash(h string) *DispatchWrapper { w.Spec.Runtime.Hash = h; return w }

// WorkloadUID sets the workload UID.
func (w *DispatchWrapper) WorkloadUID(uid types.UID) *DispatchWrapper {
	w.Spec.Workload.UID = uid
	return w
}

// Available marks the target Available=True with a fresh heartbeat, as the
// hub's target controller does.
func (w *TargetWrapper) Available() *TargetWrapper {
	return w.AvailableCondition(metav1.ConditionTrue, v1alpha1.ReasonHeartbeatFresh)
}

// AvailableCondition sets the Available condition to status with reason.
func (w *TargetWrapper) AvailableCondition(status metav1.ConditionStatus, reason string) *TargetWrapper {
	apimeta.SetStatusCondition(&w.Status.Conditions, metav1.Condition{
		Type: v1alpha1.TargetAvailable, Status: status, Reason: reason, Message: "set by test",
	})
	return w
}

// Paused sets spec.paused.
func (w *TargetWrapper) Paused() *TargetWrapper { w.Spec.Paused = true; return w }

// OutOfService sets spec.outOfService.
func (w *TargetWrapper) OutOfService() *TargetWrapper { w.Spec.OutOfService = true; return w }

// LeaseLoss sets spec.leaseLoss.
func (w *TargetWrapper) LeaseLoss(p v1alpha1.LeaseLossPolicy) *TargetWrapper {
	w.Spec.LeaseLoss = p
	return w
}

// FreeGPUs sets status.freeGPUs.
func (w *TargetWrapper) FreeGPUs(n int64) *TargetWrapper { w.Status.FreeGPUs = n; return w }

// FreeGPUsPerNode publishes one topology domain whose nodes have the given
// free GPUs, and sets status.freeGPUs to their sum.
func (w *TargetWrapper) FreeGPUsPerNode(free ...int32) *TargetWrapper {
	d := v1alpha1.TopologyDomain{Values: []string{}, FreeGPUsPerNode: free}
	var sum int64
	for i, f := range free {
		d.Nodes = append(d.Nodes, fmt.Sprintf("%s-node-%d", w.Name, i))
		sum += int64(f)
	}
	w.Status.Topology = &v1alpha1.TopologyStatus{Levels: []string{"kubernetes.io/hostname"}, Domains: []v1alpha1.TopologyDomain{d}}
	w.Status.FreeGPUs = sum
	return w
}

// MaxGPUsPerNode sets status.maxGPUsPerNode (0: unknown).
func (w *TargetWrapper) MaxGPUsPerNode(n int64) *TargetWrapper {
	w.Status.MaxGPUsPerNode = n
	return w
}

// Annotation sets one annotation.
func (w *DispatchWrapper) Annotation(k, v string) *DispatchWrapper {
	if w.Annotations == nil {
		w.Annotations = map[string]string{}
	}
	w.Annotations[k] = v
	return w
}

// Finalizers replaces the Dispatch's finalizers.
func (w *DispatchWrapper) Finalizers(f ...string) *DispatchWrapper {
	w.ObjectMeta.Finalizers = f
	return w
}

// DeletionTimestamp marks the Dispatch deleted at t; it needs a finalizer
// to be stored in a fake client.
func (w *DispatchWrapper) DeletionTimestamp(t time.Time) *DispatchWrapper {
	w.ObjectMeta.DeletionTimestamp = &metav1.Time{Time: t}
	return w
}

// Phase sets status.phase.
func (w *DispatchWrapper) Phase(p v1alpha1.DispatchPhase) *DispatchWrapper {
	w.Status.Phase = p
	return w
}

// Progress sets status.trainerStatus as the agent reports it for the
// Dispatch's attempt.
func (w *DispatchWrapper) Progress(ts *trainer.TrainerStatus) *DispatchWrapper {
	w.Status.TrainerStatus = ts
	w.Status.ObservedAttempt = w.Spec.Attempt
	return w
}

// Remote sets status.remote.
func (w *DispatchWrapper) Remote(ref *v1alpha1.RemoteRef) *DispatchWrapper {
	w.Status.Remote = ref
	return w
}

// FlavorlessJobs sets whether the target takes jobs admitted with no flavor.
func (w *TargetWrapper) FlavorlessJobs(p v1alpha1.FlavorlessJobsPolicy) *TargetWrapper {
	w.Spec.FlavorlessJobs = p
	return w
}

// CPUAndMemory sets the target's published total and free CPU and memory.
func (w *TargetWrapper) CPUAndMemory(total, free corev1.ResourceList) *TargetWrapper {
	if w.Status.Capacity == nil {
		w.Status.Capacity = corev1.ResourceList{}
	}
	if w.Status.Free == nil {
		w.Status.Free = corev1.ResourceList{}
	}
	for k, v := range total {
		w.Status.Capacity[k] = v
	}
	for k, v := range free {
		w.Status.Free[k] = v
	}
	return w
}

// HostImages sets the images a bare-node Slurm cluster's host environment
// stands for (spec.images.hostEnvironment).
func (w *TargetWrapper) HostImages(patterns ...string) *TargetWrapper {
	if w.Spec.Images == nil {
		w.Spec.Images = &v1alpha1.TargetImages{}
	}
	w.Spec.Images.HostEnvironment = patterns
	return w
}

// AllowedImages limits a target that runs containers to these images
// (spec.images.allowed).
func (w *TargetWrapper) AllowedImages(patterns ...string) *TargetWrapper {
	if w.Spec.Images == nil {
		w.Spec.Images = &v1alpha1.TargetImages{}
	}
	w.Spec.Images.Allowed = patterns
	return w
}

// SlurmLaunchers sets the launchers the Slurm cluster offers.
func (w *TargetWrapper) SlurmLaunchers(l ...v1alpha1.Launcher) *TargetWrapper {
	w.Spec.Slurm.Launchers = l
	return w
}

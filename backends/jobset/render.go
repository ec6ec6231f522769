package jobset

import (
	"fmt"
	"maps"
	"slices"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	kueueconstants "sigs.k8s.io/kueue/pkg/controller/constants"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/backends/kubework"
)

// RenderOptions says where the rendered JobSet lives on the spoke.
type RenderOptions struct {
	// Namespace on the spoke for the JobSet.
	Namespace string
	// Check refuses the runtime and TrainJob the backend cannot run, before
	// anything is rendered (default CheckRuntime); a backend that renders
	// through this one passes its own, and the hub's eligibility check
	// calls Render, so the hub and the agent share one source of truth.
	Check func(*trainer.TrainingRuntimeSpec, *trainer.TrainJobSpec) error
	// Policy is what the Target lets tenants put in pod specs (zero: a
	// default Target's); every rendered pod template is checked against it.
	Policy kubework.PodPolicy
	// PeerLabel is the pod label whose value, the job's name, selects the
	// pods its NetworkPolicy lets talk to each other (default JobSet's
	// jobset.sigs.k8s.io/jobset-name).
	PeerLabel string
}

// Render turns d into the JobSet that runs it on a spoke: Trainer's runtime
// framework builds it from the TrainJob and runtime snapshots, then trainyard
// names it, labels it and pins its pod sets to their topology domains. Input
// that can never render returns an error wrapping backends.ErrRejected.
func Render(d *v1alpha1.Dispatch, opts RenderOptions) (*jobsetv1alpha2.JobSet, error) {
	r, err := RenderAll(d, opts)
	if err != nil {
		return nil, err
	}
	return r.JobSet, nil
}

// Rendered is a Dispatch's remote work: the JobSet and the objects its pods
// need, which Submit creates owned by the JobSet.
type Rendered struct {
	JobSet *jobsetv1alpha2.JobSet
	// Companions are, in the JobSet's namespace, an MPI job's SSH key
	// Secret (a fresh key pair on every render) and hostfile ConfigMap, or a
	// Flux job's curve key Secret (derived from the TrainJob's UID, so the
	// same on every render) and init script ConfigMap; and last, always,
	// the NetworkPolicy that lets the job's pods reach each other.
	Companions []client.Object
}

// RenderAll renders the JobSet and its companions.
func RenderAll(d *v1alpha1.Dispatch, opts RenderOptions) (*Rendered, error) {
	if opts.Namespace == "" {
		return nil, fmt.Errorf("render %s/%s: no spoke namespace", d.Namespace, d.Name)
	}
	tj, err := remoteTrainJob(d, opts.Namespace)
	if err != nil {
		return nil, backends.Rejected(d, err)
	}
	check := opts.Check
	if check == nil {
		check = CheckRuntime
	}
	spec, err := runtimeSpec(d, tj, check)
	if err != nil {
		return nil, backends.Rejected(d, err)
	}
	fw, err := sharedFramework()
	if err != nil {
		return nil, err
	}
	js, companions, err := fw.buildJobSet(tj, spec)
	if err != nil {
		return nil, backends.Rejected(d, err)
	}
	// The policy judges the pods as the runtime and the TrainJob make them,
	// before placement pins them to their topology domains: that node
	// affinity is trainyard's, not the tenant's.
	if err := applyPolicy(js, companions, opts.Policy); err != nil {
		return nil, backends.Rejected(d, err)
	}
	if err := placePodSets(js, d.Spec.PodSets); err != nil {
		return nil, backends.Rejected(d, err)
	}
	finish(js, d)
	peer := opts.PeerLabel
	if peer == "" {
		peer = jobsetv1alpha2.JobSetNameKey
	}
	companions = append(companions, kubework.JobNetworkPolicy(js.Namespace, js.Name, peer, js.Name))
	for _, o := range companions {
		o.SetNamespace(js.Namespace)
		o.SetLabels(backends.RemoteLabels(d))
	}
	return &Rendered{JobSet: js, Companions: companions}, nil
}

// applyPolicy refuses a JobSet whose pods set what policy does not allow,
// or reference a Secret or ConfigMap that is not one of its companions. It
// reads the pods as they run: Trainer's render has applied every runtime
// patch the TrainJob kept (all but Kueue's, see remoteTrainJob), and a pod
// that sets no termination grace gets the policy's cap when that is below
// Kubernetes' default (PodPolicy.BoundGrace).
func applyPolicy(js *jobsetv1alpha2.JobSet, companions []client.Object, policy kubework.PodPolicy) error {
	var own kubework.Own
	for _, o := range companions {
		switch o.(type) {
		case *corev1.Secret:
			own.Secrets = append(own.Secrets, o.GetName())
		case *corev1.ConfigMap:
			own.ConfigMaps = append(own.ConfigMaps, o.GetName())
		}
	}
	for i := range js.Spec.ReplicatedJobs {
		rj := &js.Spec.ReplicatedJobs[i]
		tmpl := &rj.Template.Spec.Template
		policy.BoundGrace(&tmpl.Spec)
		if err := policy.Check("replicated job "+rj.Name, &tmpl.ObjectMeta, &tmpl.Spec, own); err != nil {
			return err
		}
	}
	return nil
}

// remoteTrainJob is the TrainJob Trainer's framework renders from. It carries
// the remote name and namespace, because Trainer derives the JobSet's name
// and the torch rendezvous address (PET_MASTER_ADDR) from them. Its metadata
// is built fresh, so no hub label (Kueue's queue name among them) is copied.
func remoteTrainJob(d *v1alpha1.Dispatch, namespace string) (*trainer.TrainJob, error) {
	tj := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{
		Name: backends.RemoteName(d), Namespace: namespace, UID: d.Spec.TrainJob.UID,
	}}
	if err := backends.DecodeObject(d.Spec.TrainJob.Spec.Raw, &tj.Spec); err != nil {
		return nil, fmt.Errorf("decode trainJob spec: %w", err)
	}
	if err := checkRuntimeRef(&tj.Spec.RuntimeRef, d.Spec.Runtime.Kind); err != nil {
		return nil, err
	}
	// The hub's Kueue suspends and may own the TrainJob; on the spoke the job
	// runs now and belongs to the spoke's JobSet controller.
	tj.Spec.Suspend = nil
	tj.Spec.ManagedBy = nil
	tj.Spec.RuntimePatches = slices.DeleteFunc(tj.Spec.RuntimePatches, func(p trainer.RuntimePatch) bool {
		return p.Manager == v1alpha1.KueueRuntimePatchManager
	})
	return tj, nil
}

// checkRuntimeRef fills the group and kind the API server defaults on the
// hub, and refuses a reference that disagrees with the snapshot's kind.
func checkRuntimeRef(ref *trainer.RuntimeRef, kind v1alpha1.RuntimeKind) error {
	if ref.APIGroup == nil || *ref.APIGroup == "" {
		ref.APIGroup = ptr.To(trainer.GroupVersion.Group)
	}
	if ref.Kind == nil || *ref.Kind == "" {
		ref.Kind = ptr.To(string(kind))
	}
	if *ref.APIGroup != trainer.GroupVersion.Group {
		return fmt.Errorf("unsupported runtime group %q", *ref.APIGroup)
	}
	if *ref.Kind != string(kind) {
		return fmt.Errorf("trainJob refers to a %s but the runtime snapshot is a %s", *ref.Kind, kind)
	}
	return nil
}

// runtimeSpec decodes the runtime snapshot, refuses what the backend cannot
// run (check: the hub's eligibility check renders too) and gives unset
// fields the defaults the Trainer CRD gives them, which a snapshot taken
// from an older CRD may lack and Trainer's plugins dereference.
func runtimeSpec(d *v1alpha1.Dispatch, tj *trainer.TrainJob, check func(*trainer.TrainingRuntimeSpec, *trainer.TrainJobSpec) error) (*trainer.TrainingRuntimeSpec, error) {
	spec := &trainer.TrainingRuntimeSpec{}
	if err := backends.DecodeObject(d.Spec.Runtime.Spec.Raw, spec); err != nil {
		return nil, fmt.Errorf("decode runtime %s %q: %w", d.Spec.Runtime.Kind, d.Spec.Runtime.Name, err)
	}
	if err := check(spec, &tj.Spec); err != nil {
		return nil, fmt.Errorf("runtime %q: %w", d.Spec.Runtime.Name, err)
	}
	if ml := spec.MLPolicy; ml != nil && ml.MPI != nil {
		mpi := ml.MPI
		if mpi.MPIImplementation == nil {
			mpi.MPIImplementation = ptr.To(trainer.MPIImplementationOpenMPI)
		}
		if mpi.NumProcPerNode == nil {
			mpi.NumProcPerNode = ptr.To[int32](1)
		}
		if mpi.SSHAuthMountPath == nil {
			mpi.SSHAuthMountPath = ptr.To("/root/.ssh")
		}
		if mpi.RunLauncherAsNode == nil {
			mpi.RunLauncherAsNode = ptr.To(false)
		}
	}
	if IsFlux(spec) {
		fluxDefaults(spec, tj)
	}
	return spec, nil
}

// fluxDefaults fills what Trainer's Flux plugin dereferences unchecked: the
// runtime's processes per node (CRD default 1) and the TrainJob's trainer
// and node count, which it takes from the runtime as Trainer's pod set
// count (and so Kueue's) does.
func fluxDefaults(spec *trainer.TrainingRuntimeSpec, tj *trainer.TrainJob) {
	flux := spec.MLPolicy.Flux
	if flux.NumProcPerNode == nil {
		flux.NumProcPerNode = ptr.To[int32](1)
	}
	if tj.Spec.Trainer == nil {
		tj.Spec.Trainer = &trainer.Trainer{}
	}
	if tj.Spec.Trainer.NumNodes == nil {
		tj.Spec.Trainer.NumNodes = ptr.To(backends.NumNodes(&tj.Spec, spec))
	}
}

// finish applies what trainyard owns on every JobSet: its labels (so the
// agent finds the Dispatch), the runtime hash, and the settings that let the
// spoke's JobSet controller run it at once.
func finish(js *jobsetv1alpha2.JobSet, d *v1alpha1.Dispatch) {
	labels := backends.RemoteLabels(d)
	js.Labels = withLabels(js.Labels, labels)
	if js.Annotations == nil {
		js.Annotations = map[string]string{}
	}
	js.Annotations[v1alpha1.AnnotationRuntimeHash] = d.Spec.Runtime.Hash
	// Trainer points the JobSet at the TrainJob, which does not exist on the
	// spoke: the garbage collector would delete the JobSet at once.
	js.OwnerReferences = nil
	js.Spec.Suspend = ptr.To(false)
	js.Spec.ManagedBy = nil
	for i := range js.Spec.ReplicatedJobs {
		tmpl := &js.Spec.ReplicatedJobs[i].Template
		tmpl.Labels = withLabels(tmpl.Labels, labels)
		tmpl.Spec.Template.Labels = withLabels(tmpl.Spec.Template.Labels, labels)
	}
}

// withLabels returns have with add merged in and Kueue's queue label removed.
func withLabels(have, add map[string]string) map[string]string {
	out := maps.Clone(have)
	if out == nil {
		out = make(map[string]string, len(add))
	}
	maps.Copy(out, add)
	// A spoke running its own Kueue would otherwise queue the job a second time.
	delete(out, kueueconstants.QueueLabel)
	return out
}

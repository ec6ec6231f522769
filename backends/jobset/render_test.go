package jobset

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	kueueconstants "sigs.k8s.io/kueue/pkg/controller/constants"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/backends/kubework"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// testPolicy is a default Target's, with the ServiceAccounts these tests
// runtimes name allowed (trainer-sa in a tenant's patch, the one Kubeflow's
// torch-distributed-with-cache runtime names).
var testPolicy = kubework.PodPolicy{Allowed: v1alpha1.AllowedPodFields{
	ServiceAccountNames: []string{"trainer-sa", "kubeflow-trainer-cache-initializer"}}}

// testNS is the tenant namespace of team-a's jobs under testPrefix.
const (
	testPrefix = "trainyard-jobs"
	testNS     = "trainyard-jobs-team-a"
)

var ctr = v1alpha1.RuntimeKindClusterTrainingRuntime

// torchDispatch is a Dispatch of a torch TrainJob with numNodes nodes of 4
// GPUs on the torch runtime, its one pod set admitted for numNodes pods.
func torchDispatch(name string, tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec, numNodes int32) *tytesting.DispatchWrapper {
	return tytesting.MakeDispatch(name, "trainyard-spoke1", "spoke1").
		SnapshotTrainJob(tj).SnapshotRuntime(ctr, "torch-distributed", rt).
		PodSets(v1alpha1.PodSetPlacement{Name: "node", Count: numNodes})
}

func mustRender(t *testing.T, d *v1alpha1.Dispatch) *jobsetv1alpha2.JobSet {
	t.Helper()
	js, err := Render(d, RenderOptions{Namespace: testNS, Policy: testPolicy})
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	return js
}

func nodeJob(t *testing.T, js *jobsetv1alpha2.JobSet) *jobsetv1alpha2.ReplicatedJob {
	t.Helper()
	for i := range js.Spec.ReplicatedJobs {
		if js.Spec.ReplicatedJobs[i].Name == "node" {
			return &js.Spec.ReplicatedJobs[i]
		}
	}
	t.Fatalf("no node replicated job in %s", js.Name)
	return nil
}

func TestRenderTorchEnv(t *testing.T) {
	rank := &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
		FieldPath: "metadata.annotations['batch.kubernetes.io/job-completion-index']",
	}}
	cases := map[string]struct {
		numNodes     int32
		procsPerNode *int32
		wantProcs    string
	}{
		"2 nodes, procs from GPUs": {numNodes: 2, wantProcs: "auto"},
		"3 nodes, 8 procs each":    {numNodes: 3, procsPerNode: ptr.To[int32](8), wantProcs: "8"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tj := tytesting.MakeTrainJob("train", "team-a").NumNodes(tc.numNodes).GPUsPerNode(4).Obj()
			tj.Spec.Trainer.NumProcPerNode = tc.procsPerNode
			d := torchDispatch("d1", tj, tytesting.TorchRuntimeSpec(1), tc.numNodes).Obj()
			js := mustRender(t, d)
			remote := backends.RemoteName(d)
			rj := nodeJob(t, js)

			want := []corev1.EnvVar{
				{Name: "PET_NNODES", Value: fmt.Sprint(tc.numNodes)},
				{Name: "PET_NPROC_PER_NODE", Value: tc.wantProcs},
				{Name: "PET_NODE_RANK", ValueFrom: rank},
				{Name: "PET_MASTER_ADDR", Value: remote + "-node-0-0." + remote},
				{Name: "PET_MASTER_PORT", Value: "29500"},
			}
			if diff := cmp.Diff(want, rj.Template.Spec.Template.Spec.Containers[0].Env); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
			gotCounts := []any{rj.Replicas, rj.Template.Spec.Parallelism, rj.Template.Spec.Completions}
			wantCounts := []any{int32(1), &tc.numNodes, &tc.numNodes}
			if diff := cmp.Diff(wantCounts, gotCounts); diff != "" {
				t.Errorf("replicas, parallelism, completions (-want +got):\n%s", diff)
			}
		})
	}
}

// kueueOwnedTrainJob is a TrainJob as the hub's Kueue leaves it: queued,
// suspended, managed by MultiKueue and patched with the hub flavor's node
// selector and a scheduling gate.
func kueueOwnedTrainJob() *trainer.TrainJob {
	tj := tytesting.MakeTrainJob("train", "team-a").Queue("lq").Suspend(true).NumNodes(2).GPUsPerNode(4).Obj()
	tj.Spec.ManagedBy = ptr.To("kueue.x-k8s.io/multikueue")
	podPatch := func(spec *trainer.PodSpecPatch) trainer.TrainingRuntimeSpecPatch {
		return trainer.TrainingRuntimeSpecPatch{Template: &trainer.JobSetTemplatePatch{Spec: &trainer.JobSetSpecPatch{
			ReplicatedJobs: []trainer.ReplicatedJobPatch{{Name: "node", Template: &trainer.JobTemplatePatch{
				Spec: &trainer.JobSpecPatch{Template: &trainer.PodTemplatePatch{Spec: spec}},
			}}},
		}}}
	}
	kueue := podPatch(&trainer.PodSpecPatch{
		NodeSelector:    map[string]string{"hub-flavor": "gpu"},
		SchedulingGates: []corev1.PodSchedulingGate{{Name: "kueue.x-k8s.io/topology"}},
	})
	user := podPatch(&trainer.PodSpecPatch{ServiceAccountName: ptr.To("trainer-sa")})
	tj.Spec.RuntimePatches = []trainer.RuntimePatch{
		{Manager: "kueue.x-k8s.io/manager", TrainingRuntimeSpec: &kueue},
		{Manager: "team-a/tools", TrainingRuntimeSpec: &user},
	}
	return tj
}

func TestRenderMetadata(t *testing.T) {
	rt := tytesting.TorchRuntimeSpec(1)
	rt.Template.Labels = map[string]string{kueueconstants.QueueLabel: "spoke-queue", "team": "a"}
	rt.Template.Spec.ManagedBy = ptr.To("kueue.x-k8s.io/multikueue")
	d := torchDispatch("d1", kueueOwnedTrainJob(), rt, 2).Obj()
	js := mustRender(t, d)
	labels := backends.RemoteLabels(d)
	jsLabels := maps.Clone(labels)
	jsLabels["team"] = "a"
	rj := nodeJob(t, js)
	pod := rj.Template.Spec.Template

	type meta struct {
		Name, Namespace string
		Labels          map[string]string
		Annotations     map[string]string
		Owners          []metav1.OwnerReference
		Suspend         *bool
		ManagedBy       *string
		PodLabels       map[string]string
		NodeSelector    map[string]string
		Gates           []corev1.PodSchedulingGate
		ServiceAccount  string
	}
	want := meta{
		Name: backends.RemoteName(d), Namespace: testNS,
		Labels:      jsLabels,
		Annotations: map[string]string{v1alpha1.AnnotationRuntimeHash: d.Spec.Runtime.Hash},
		Suspend:     ptr.To(false),
		PodLabels:   labels,
		// The user's runtime patch reaches the spoke; Kueue's does not.
		ServiceAccount: "trainer-sa",
	}
	got := meta{
		Name: js.Name, Namespace: js.Namespace, Labels: js.Labels, Annotations: js.Annotations,
		Owners: js.OwnerReferences, Suspend: js.Spec.Suspend, ManagedBy: js.Spec.ManagedBy,
		PodLabels: pod.Labels, NodeSelector: pod.Spec.NodeSelector, Gates: pod.Spec.SchedulingGates,
		ServiceAccount: pod.Spec.ServiceAccountName,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metadata (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(labels, rj.Template.Labels, ignoreKeys("trainer.kubeflow.org/trainjob-ancestor-step")); diff != "" {
		t.Errorf("job template labels (-want +got):\n%s", diff)
	}
}

func ignoreKeys(keys ...string) cmp.Option {
	return cmp.FilterPath(func(p cmp.Path) bool {
		mi, ok := p.Last().(cmp.MapIndex)
		if !ok {
			return false
		}
		for _, k := range keys {
			if mi.Key().String() == k {
				return true
			}
		}
		return false
	}, cmp.Ignore())
}

func TestRenderNodeAffinity(t *testing.T) {
	rack, block := "topology.kubernetes.io/rack", "topology.kubernetes.io/block"
	in := func(key, v string) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{v}}
	}
	required := func(terms ...corev1.NodeSelectorTerm) *corev1.Affinity {
		return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms},
		}}
	}
	term := func(reqs ...corev1.NodeSelectorRequirement) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: reqs}
	}
	gpuNodes := term(in("type", "gpu"))
	cases := map[string]struct {
		own      *corev1.Affinity
		topology *v1alpha1.TopologyAssignment
		want     *corev1.Affinity
	}{
		"no topology": {},
		"one domain, every level": {
			topology: &v1alpha1.TopologyAssignment{Levels: []string{block, rack},
				Domains: []v1alpha1.TopologyDomainAssignment{{Values: []string{"b1", "r2"}, Count: 2}}},
			want: required(term(in(block, "b1"), in(rack, "r2"))),
		},
		"two domains, ORed": {
			topology: &v1alpha1.TopologyAssignment{Levels: []string{rack}, Domains: []v1alpha1.TopologyDomainAssignment{
				{Values: []string{"r1"}, Count: 1}, {Values: []string{"r2"}, Count: 1}}},
			want: required(term(in(rack, "r1")), term(in(rack, "r2"))),
		},
		"advisory nodes (no topology asked): no affinity added": {
			topology: &v1alpha1.TopologyAssignment{Levels: []string{rack, "kubernetes.io/hostname"}, Advisory: true,
				Domains: []v1alpha1.TopologyDomainAssignment{{Values: []string{"r1", "n1"}, Count: 2}}},
		},
		"runtime affinity kept and ANDed": {
			own: required(gpuNodes),
			topology: &v1alpha1.TopologyAssignment{Levels: []string{rack}, Domains: []v1alpha1.TopologyDomainAssignment{
				{Values: []string{"r1"}, Count: 1}, {Values: []string{"r2"}, Count: 1}}},
			want: required(term(in("type", "gpu"), in(rack, "r1")), term(in("type", "gpu"), in(rack, "r2"))),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rt := tytesting.TorchRuntimeSpec(1)
			rt.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Affinity = tc.own
			tj := tytesting.MakeTrainJob("train", "team-a").NumNodes(2).GPUsPerNode(4).Obj()
			d := torchDispatch("d1", tj, rt, 2).
				PodSets(v1alpha1.PodSetPlacement{Name: "node", Count: 2, Topology: tc.topology}).Obj()
			want := tc.want
			if want == nil {
				want = tc.own
			}
			// The Target allows the runtime's own affinity on "type"; the
			// topology levels trainyard adds need no allowing.
			policy := testPolicy
			policy.Allowed.Affinity, policy.Allowed.NodeSelectorKeys = true, []string{"type"}
			js, err := Render(d, RenderOptions{Namespace: testNS, Policy: policy})
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			got := nodeJob(t, js).Template.Spec.Template.Spec.Affinity
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("affinity (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRenderRejects(t *testing.T) {
	tj := tytesting.MakeTrainJob("train", "team-a").NumNodes(2).GPUsPerNode(4).Obj()
	good := func() *tytesting.DispatchWrapper { return torchDispatch("d1", tj, tytesting.TorchRuntimeSpec(1), 2) }
	withRuntime := func(edit func(*trainer.TrainingRuntimeSpec)) *v1alpha1.Dispatch {
		rt := tytesting.TorchRuntimeSpec(1)
		edit(&rt)
		return good().SnapshotRuntime(ctr, "torch-distributed", rt).Obj()
	}
	raw := func(s string) runtime.RawExtension { return runtime.RawExtension{Raw: []byte(s)} }
	cases := map[string]struct {
		d    *v1alpha1.Dispatch
		want string
	}{
		"trainJob spec not JSON": {
			d:    func() *v1alpha1.Dispatch { d := good().Obj(); d.Spec.TrainJob.Spec = raw(`{"runtimeRef":`); return d }(),
			want: "decode trainJob spec",
		},
		"runtime spec not an object": {
			d:    func() *v1alpha1.Dispatch { d := good().Obj(); d.Spec.Runtime.Spec = raw(`[1]`); return d }(),
			want: "decode runtime",
		},
		"runtime with no replicated jobs": {
			d:    func() *v1alpha1.Dispatch { d := good().Obj(); d.Spec.Runtime.Spec = raw(`{"template":{}}`); return d }(),
			want: "has no replicated jobs",
		},
		"MPI other than OpenMPI": {
			d: withRuntime(func(rt *trainer.TrainingRuntimeSpec) {
				rt.MLPolicy.Torch, rt.MLPolicy.MPI = nil, &trainer.MPIMLPolicySource{MPIImplementation: ptr.To(trainer.MPIImplementationIntel)}
			}),
			want: "MPI implementation Intel is not supported",
		},
		"pod group policy": {
			d: withRuntime(func(rt *trainer.TrainingRuntimeSpec) {
				rt.PodGroupPolicy = &trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{}}}
			}),
			want: "podGroupPolicy is not supported",
		},
		"runtime of another API group": {
			d: good().SnapshotTrainJob(func() *trainer.TrainJob {
				o := tj.DeepCopy()
				o.Spec.RuntimeRef.APIGroup = ptr.To("example.com")
				return o
			}()).Obj(),
			want: `unsupported runtime group "example.com"`,
		},
		"runtime ref kind differs from snapshot": {
			d:    good().SnapshotRuntime(v1alpha1.RuntimeKindTrainingRuntime, "torch", tytesting.TorchRuntimeSpec(1)).Obj(),
			want: "refers to a ClusterTrainingRuntime but the runtime snapshot is a TrainingRuntime",
		},
		"replicated job without pod set": {
			d:    good().PodSets(v1alpha1.PodSetPlacement{Name: "launcher", Count: 1}).Obj(),
			want: `replicated job "node" has no pod set`,
		},
		"more pods than admitted": {
			d:    good().PodSets(v1alpha1.PodSetPlacement{Name: "node", Count: 1}).Obj(),
			want: `renders 2 pods but pod set "node" was admitted for 1`,
		},
		"extra pod set": {
			d:    good().PodSets(v1alpha1.PodSetPlacement{Name: "node", Count: 2}, v1alpha1.PodSetPlacement{Name: "launcher", Count: 1}).Obj(),
			want: `pod set "launcher" names no replicated job`,
		},
		"topology values do not match levels": {
			d: good().PodSets(v1alpha1.PodSetPlacement{Name: "node", Count: 2, Topology: &v1alpha1.TopologyAssignment{
				Levels: []string{"rack", "block"}, Domains: []v1alpha1.TopologyDomainAssignment{{Values: []string{"r1"}, Count: 2}}}}).Obj(),
			want: "gives 1 values for 2 levels",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			js, err := Render(tc.d, RenderOptions{Namespace: testNS})
			if !errors.Is(err, backends.ErrRejected) {
				t.Fatalf("Render = %v, %v; want an error wrapping ErrRejected", js, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// TestRenderConcurrently: the agent submits from several workers at once;
// the shared Trainer framework must give each the same, independent result.
func TestRenderConcurrently(t *testing.T) {
	tj := tytesting.MakeTrainJob("train", "team-a").NumNodes(2).GPUsPerNode(4).Obj()
	want := mustRender(t, torchDispatch("d1", tj, tytesting.TorchRuntimeSpec(1), 2).Obj())
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			js, err := Render(torchDispatch("d1", tj, tytesting.TorchRuntimeSpec(1), 2).Obj(), RenderOptions{Namespace: testNS})
			if err == nil && !cmp.Equal(want, js) {
				err = fmt.Errorf("concurrent render differs:\n%s", cmp.Diff(want, js))
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

package lws

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	lwsv1 "sigs.k8s.io/lws/api/leaderworkerset/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/backends/jobset"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

const testNS = "trainyard-jobs"

var ctr = v1alpha1.RuntimeKindClusterTrainingRuntime

func torchDispatch(numNodes int32, rt trainer.TrainingRuntimeSpec) *tytesting.DispatchWrapper {
	tj := tytesting.MakeTrainJob("train", "team-a").NumNodes(numNodes).GPUsPerNode(4).Obj()
	return tytesting.MakeDispatch("d1", "trainyard-spoke1", "spoke1").
		SnapshotTrainJob(tj).SnapshotRuntime(ctr, "torch", rt).
		PodSets(v1alpha1.PodSetPlacement{Name: "node", Count: numNodes})
}

func TestRenderTorch(t *testing.T) {
	d := torchDispatch(3, tytesting.TorchRuntimeSpec(1)).Obj()
	d.Spec.PodSets[0].Topology = &v1alpha1.TopologyAssignment{Levels: []string{"rack"}, Domains: []v1alpha1.TopologyDomainAssignment{{Values: []string{"r1"}, Count: 3}}}
	r, err := Render(d, jobset.RenderOptions{Namespace: testNS})
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	lws, name := r.LWS, backends.RemoteName(d)
	if lws.Name != name || lws.Namespace != testNS {
		t.Errorf("name %s/%s, want %s/%s", lws.Namespace, lws.Name, testNS, name)
	}
	tmpl := lws.Spec.LeaderWorkerTemplate
	got := []any{ptr.Deref(lws.Spec.Replicas, 0), ptr.Deref(tmpl.Size, 0), tmpl.LeaderTemplate == nil, tmpl.RestartPolicy, lws.Spec.StartupPolicy}
	want := []any{int32(1), int32(3), true, lwsv1.NoneRestartPolicy, lwsv1.LeaderCreatedStartupPolicy}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("replicas, size, no leader template, restart policy, startup policy (-want +got):\n%s", diff)
	}
	pod := tmpl.WorkerTemplate.Spec
	if pod.RestartPolicy != corev1.RestartPolicyAlways {
		t.Errorf("restartPolicy %s, want Always (StatefulSet pods)", pod.RestartPolicy)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range pod.Containers[0].Env {
		env[e.Name] = e
	}
	if e := env["PET_NODE_RANK"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != workerIndexField {
		t.Errorf("PET_NODE_RANK = %+v, want the worker index label", e)
	}
	if e := env["PET_MASTER_ADDR"]; e.Value != "$(LWS_LEADER_ADDRESS)" || e.ValueFrom != nil {
		t.Errorf("PET_MASTER_ADDR = %+v, want $(LWS_LEADER_ADDRESS)", e)
	}
	if env["PET_NNODES"].Value != "3" {
		t.Errorf("PET_NNODES = %q, want 3", env["PET_NNODES"].Value)
	}
	for _, o := range []map[string]string{lws.Labels, tmpl.WorkerTemplate.Labels} {
		if o[v1alpha1.LabelDispatchName] != d.Name || o[backends.LabelWorkloadUID] != string(d.Spec.Workload.UID) {
			t.Errorf("labels %v lack the Dispatch's", o)
		}
	}
	terms := pod.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || terms[0].MatchExpressions[0].Key != "rack" || terms[0].MatchExpressions[0].Values[0] != "r1" {
		t.Errorf("node affinity %v, want the placed rack r1", terms)
	}
}

func TestRenderMPI(t *testing.T) {
	cases := map[string]struct {
		numNodes       int32
		launcherAsNode bool
		wantSize       int32
		wantHosts      []string // host suffixes after "<name>-"
	}{
		"launcher and two nodes":      {numNodes: 2, wantSize: 3, wantHosts: []string{"0-1", "0-2"}},
		"launcher runs as a node too": {numNodes: 3, launcherAsNode: true, wantSize: 3, wantHosts: []string{"0", "0-1", "0-2"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := tytesting.MPIDispatch(tc.numNodes, 2, tc.launcherAsNode).Obj()
			r, err := Render(d, jobset.RenderOptions{Namespace: testNS})
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			remote := backends.RemoteName(d)
			tmpl := r.LWS.Spec.LeaderWorkerTemplate
			if ptr.Deref(tmpl.Size, 0) != tc.wantSize || tmpl.LeaderTemplate == nil {
				t.Fatalf("size %d, leader template %v; want %d with the launcher as leader", ptr.Deref(tmpl.Size, 0), tmpl.LeaderTemplate != nil, tc.wantSize)
			}
			if cmd := tmpl.LeaderTemplate.Spec.Containers[0].Command[0]; cmd != "mpirun" {
				t.Errorf("leader runs %q, want mpirun", cmd)
			}
			if cmd := tmpl.WorkerTemplate.Spec.Containers[0].Command[0]; cmd != "/usr/sbin/sshd" {
				t.Errorf("workers run %q, want sshd", cmd)
			}
			var hostfile string
			for _, o := range r.Companions {
				if cm, ok := o.(*corev1.ConfigMap); ok {
					hostfile = cm.Data["hostfile"]
				}
			}
			var want strings.Builder
			for _, h := range tc.wantHosts {
				want.WriteString(remote + "-" + h + "." + remote + " slots=2\n")
			}
			if hostfile != want.String() {
				t.Errorf("hostfile:\n%s\nwant:\n%s", hostfile, want.String())
			}
		})
	}
}

// TestRenderRejects: what a LeaderWorkerSet cannot hold is refused by
// Render, for the same reason Eligible gives the hub.
func TestRenderRejects(t *testing.T) {
	shipped := func(path string, podSets ...v1alpha1.PodSetPlacement) *v1alpha1.Dispatch {
		d, err := tytesting.ShippedDispatch(path, nil, podSets...)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	node := v1alpha1.PodSetPlacement{Name: "node", Count: 1}
	dataset := v1alpha1.PodSetPlacement{Name: "dataset-initializer", Count: 1}
	cases := map[string]struct {
		d    *v1alpha1.Dispatch
		want error
	}{
		"Flux, shipped":             {d: shipped(tytesting.TrainerFluxRuntime, node), want: ErrFlux},
		"torchtune, shipped":        {d: shipped(tytesting.TrainerTorchtuneLlama1B, dataset, v1alpha1.PodSetPlacement{Name: "model-initializer", Count: 1}, node), want: ErrVolumeClaimPolicies},
		"torch with cache, shipped": {d: shipped(tytesting.TrainerTorchWithCache, dataset, node), want: ErrInitializers},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Render(tc.d, jobset.RenderOptions{Namespace: testNS})
			if !errors.Is(err, backends.ErrRejected) || !errors.Is(err, tc.want) {
				t.Fatalf("Render error = %v, want rejected with %v", err, tc.want)
			}
		})
	}
}

func TestRenameHosts(t *testing.T) {
	cases := map[string]struct{ in, want, wantErr string }{
		"nodes and launcher":  {in: "j-launcher-0-0.j slots=1\nj-node-0-0.j slots=1\nj-node-0-9.j slots=1\n", want: "j-0.j slots=1\nj-0-1.j slots=1\nj-0-10.j slots=1\n"},
		"no trailing newline": {in: "j-node-0-0.j slots=4", want: "j-0-1.j slots=4"},
		"other subdomain":     {in: "j-node-0-0.k slots=1\n", wantErr: "not in subdomain j"},
		"unknown host":        {in: "j-worker-0-0.j slots=1\n", wantErr: "neither the launcher nor a node"},
		"bad index":           {in: "j-node-0-x.j slots=1\n", wantErr: "no node index"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := renameHosts(tc.in, "j")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("renameHosts error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("renameHosts = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// pod is a pod of group "j": its worker index, phase and, when exited, the
// trainer container's last exit code.
func pod(index string, phase corev1.PodPhase, ready bool, exit *int32) corev1.Pod {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "j-0-" + index, Labels: map[string]string{lwsv1.WorkerIndexLabelKey: index}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "node"}}},
		Status:     corev1.PodStatus{Phase: phase, StartTime: &metav1.Time{}},
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	cs := corev1.ContainerStatus{Name: "node", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	if exit != nil {
		cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: *exit}
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
	return p
}

func TestGroupStatus(t *testing.T) {
	zero, three := ptr.To[int32](0), ptr.To[int32](3)
	group := &lwsv1.LeaderWorkerSet{ObjectMeta: metav1.ObjectMeta{Name: "j"},
		Spec: lwsv1.LeaderWorkerSetSpec{LeaderWorkerTemplate: lwsv1.LeaderWorkerTemplate{Size: ptr.To[int32](2)}}}
	deleting := group.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{}
	cases := map[string]struct {
		lws      *lwsv1.LeaderWorkerSet
		pods     []corev1.Pod
		want     v1alpha1.DispatchPhase
		wantCode *int32
	}{
		"no pods yet":            {lws: group, want: v1alpha1.DispatchSubmitted},
		"one of two ready":       {lws: group, pods: []corev1.Pod{pod("0", corev1.PodRunning, true, nil), pod("1", corev1.PodPending, false, nil)}, want: v1alpha1.DispatchSubmitted},
		"all ready":              {lws: group, pods: []corev1.Pod{pod("0", corev1.PodRunning, true, nil), pod("1", corev1.PodRunning, true, nil)}, want: v1alpha1.DispatchRunning},
		"leader exited 0":        {lws: group, pods: []corev1.Pod{pod("0", corev1.PodRunning, true, zero), pod("1", corev1.PodRunning, true, nil)}, want: v1alpha1.DispatchSucceeded},
		"worker exited 0 only":   {lws: group, pods: []corev1.Pod{pod("0", corev1.PodRunning, true, nil), pod("1", corev1.PodRunning, true, zero)}, want: v1alpha1.DispatchRunning},
		"worker exited 3":        {lws: group, pods: []corev1.Pod{pod("0", corev1.PodRunning, true, zero), pod("1", corev1.PodRunning, true, three)}, want: v1alpha1.DispatchFailed, wantCode: three},
		"deleted before the end": {lws: deleting, pods: []corev1.Pod{pod("0", corev1.PodRunning, true, nil)}, want: v1alpha1.DispatchCancelled},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			st := groupStatus(tc.lws, tc.pods, metav1.Now())
			if st.Phase != tc.want || !cmp.Equal(st.ExitCode, tc.wantCode) {
				t.Fatalf("phase %s exit %v (%s), want %s exit %v", st.Phase, ptr.Deref(st.ExitCode, -1), st.Message, tc.want, ptr.Deref(tc.wantCode, -1))
			}
			if st.Phase.IsFinal() && st.CompletionTime == nil {
				t.Errorf("final phase without completion time")
			}
		})
	}
}

package jobset

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
)

const rackLabel = "topology.kubernetes.io/rack"

type nodeOpt func(*corev1.Node)

func notReady(n *corev1.Node)   { n.Status.Conditions[0].Status = corev1.ConditionFalse }
func cordoned(n *corev1.Node)   { n.Spec.Unschedulable = true }
func inRack(r string) nodeOpt   { return func(n *corev1.Node) { n.Labels[rackLabel] = r } }
func label(k, v string) nodeOpt { return func(n *corev1.Node) { n.Labels[k] = v } }
func res(cpu, mem string, gpus int64) corev1.ResourceList {
	l := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
	if gpus > 0 {
		l[GPUResource] = *resource.NewQuantity(gpus, resource.DecimalSI)
	}
	return l
}

func withGPUs(l corev1.ResourceList, gpus int64) corev1.ResourceList {
	l[GPUResource] = *resource.NewQuantity(gpus, resource.DecimalSI)
	return l
}

func node(name string, gpus int64, opts ...nodeOpt) corev1.Node {
	n := corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{HostnameLevel: name}},
		Status: corev1.NodeStatus{
			Allocatable: res("64", "512Gi", gpus),
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
	for _, o := range opts {
		o(&n)
	}
	return n
}

func gpuPod(name, nodeName string, phase corev1.PodPhase, gpus int64) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "jobs"},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{
			Name: "c", Resources: corev1.ResourceRequirements{Requests: res("2", "8Gi", gpus)},
		}}},
		Status: corev1.PodStatus{Phase: phase},
	}
}

// quantities makes ResourceLists compare by value, not by internal format.
var quantities = cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })

func TestCapacityOf(t *testing.T) {
	bigInit := gpuPod("init", "n2", corev1.PodRunning, 1)
	bigInit.Spec.InitContainers = []corev1.Container{{Name: "i", Resources: corev1.ResourceRequirements{Requests: res("1", "1Gi", 4)}}}
	cases := map[string]struct {
		nodes  []corev1.Node
		pods   []corev1.Pod
		levels []string
		want   backends.Capacity
	}{
		"no levels: one domain with no values": {
			nodes: []corev1.Node{node("n2", 4), node("n1", 8)},
			want: backends.Capacity{
				Capacity: res("128", "1Ti", 12), Free: res("128", "1Ti", 12), MaxGPUsPerNode: 8,
				Topology: &v1alpha1.TopologyStatus{Levels: []string{HostnameLevel}, Domains: []v1alpha1.TopologyDomain{
					{Values: []string{}, Nodes: []string{"n1", "n2"}, FreeGPUsPerNode: []int32{8, 4}}}},
			},
		},
		"pods holding resources, by rack": {
			nodes: []corev1.Node{node("n1", 4, inRack("r1")), node("n2", 4, inRack("r1")), node("n3", 4, inRack("r2"))},
			pods: []corev1.Pod{
				gpuPod("running", "n1", corev1.PodRunning, 4),
				gpuPod("bound-pending", "n3", corev1.PodPending, 1),
				gpuPod("done", "n2", corev1.PodSucceeded, 4),
				gpuPod("failed", "n2", corev1.PodFailed, 4),
				gpuPod("unbound", "", corev1.PodPending, 4),
				gpuPod("elsewhere", "gone-node", corev1.PodRunning, 4),
				bigInit, // init container's 4 GPUs outweigh the main container's 1
			},
			levels: []string{rackLabel},
			want: backends.Capacity{
				Capacity: res("192", "1536Gi", 12), Free: res("186", "1512Gi", 3), MaxGPUsPerNode: 4,
				Topology: &v1alpha1.TopologyStatus{Levels: []string{rackLabel, HostnameLevel}, Domains: []v1alpha1.TopologyDomain{
					{Values: []string{"r1"}, Nodes: []string{"n1", "n2"}, FreeGPUsPerNode: []int32{0, 0}},
					{Values: []string{"r2"}, Nodes: []string{"n3"}, FreeGPUsPerNode: []int32{3}}}},
			},
		},
		"cordoned and NotReady nodes there with nothing free; unlabelled node only in totals": {
			nodes: []corev1.Node{
				node("ok", 4, label("block", "b1"), inRack("r1")),
				node("no-rack", 2, label("block", "b1")),
				node("down", 4, notReady, label("block", "b1"), inRack("r1")),
				node("cordoned", 4, cordoned, label("block", "b1"), inRack("r1")),
			},
			pods:   []corev1.Pod{gpuPod("on-cordoned", "cordoned", corev1.PodRunning, 1)},
			levels: []string{"block", rackLabel, HostnameLevel},
			want: backends.Capacity{
				Capacity: res("256", "2Ti", 14), Free: res("128", "1Ti", 6), MaxGPUsPerNode: 4,
				Topology: &v1alpha1.TopologyStatus{Levels: []string{"block", rackLabel, HostnameLevel}, Domains: []v1alpha1.TopologyDomain{
					{Values: []string{"b1", "r1"}, Nodes: []string{"cordoned", "down", "ok"}, FreeGPUsPerNode: []int32{0, 0, 4}}}},
			},
		},
		"only cordoned big node: largest node still counts": {
			nodes: []corev1.Node{node("big", 8, cordoned), node("small", 2)},
			want: backends.Capacity{
				Capacity: res("128", "1Ti", 10), Free: res("64", "512Gi", 2), MaxGPUsPerNode: 8,
				Topology: &v1alpha1.TopologyStatus{Levels: []string{HostnameLevel}, Domains: []v1alpha1.TopologyDomain{
					{Values: []string{}, Nodes: []string{"big", "small"}, FreeGPUsPerNode: []int32{0, 2}}}},
			},
		},
		"over-committed node shows nothing free": {
			nodes: []corev1.Node{node("n1", 2)},
			pods:  []corev1.Pod{gpuPod("a", "n1", corev1.PodRunning, 2), gpuPod("b", "n1", corev1.PodRunning, 2)},
			want: backends.Capacity{
				Capacity: res("64", "512Gi", 2), Free: withGPUs(res("60", "496Gi", 0), 0), MaxGPUsPerNode: 2,
				Topology: &v1alpha1.TopologyStatus{Levels: []string{HostnameLevel}, Domains: []v1alpha1.TopologyDomain{
					{Values: []string{}, Nodes: []string{"n1"}, FreeGPUsPerNode: []int32{0}}}},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := capacityOf(tc.nodes, tc.pods, tc.levels)
			if diff := cmp.Diff(tc.want, *got, quantities); diff != "" {
				t.Errorf("capacity (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCapacityReadsThroughClient: Capacity lists nodes and pods in every
// namespace through the backend's client.
func TestCapacityReadsThroughClient(t *testing.T) {
	n1, n2 := node("n1", 4, inRack("r1")), node("n2", 4, inRack("r2"))
	p := gpuPod("p", "n2", corev1.PodRunning, 3)
	p.Namespace = "other-team"
	c := newFakeClient(&n1, &n2, &p)
	got, err := New(c, Options{TopologyLevels: []string{rackLabel}}).Capacity(context.Background())
	if err != nil {
		t.Fatalf("Capacity: %v", err)
	}
	want := &v1alpha1.TopologyStatus{Levels: []string{rackLabel, HostnameLevel}, Domains: []v1alpha1.TopologyDomain{
		{Values: []string{"r1"}, Nodes: []string{"n1"}, FreeGPUsPerNode: []int32{4}},
		{Values: []string{"r2"}, Nodes: []string{"n2"}, FreeGPUsPerNode: []int32{1}},
	}}
	if diff := cmp.Diff(want, got.Topology); diff != "" {
		t.Errorf("topology (-want +got):\n%s", diff)
	}
	if free := got.Free[GPUResource]; free.Value() != 5 {
		t.Errorf("free GPUs = %s, want 5", free.String())
	}
}

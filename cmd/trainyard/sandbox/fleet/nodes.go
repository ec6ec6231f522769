package fleet

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GPUResource is the extended resource simulated GPUs are published as.
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// KwokTaint is the taint kwok's own examples put on simulated nodes to keep
// real workloads off them. Harness nodes carry no taint by default: a spoke
// whose only nodes are kwok nodes has no real workloads to protect, and
// upstream runtimes (Kubeflow's ClusterTrainingRuntimes) do not tolerate
// it. A test that wants it names it in NodeSpec.Taints.
var KwokTaint = corev1.Taint{Key: "kwok.x-k8s.io/node", Value: "fake", Effect: corev1.TaintEffectNoSchedule}

// KwokToleration tolerates KwokTaint; runtimes written for tainted kwok
// clusters carry it, and it does no harm on harness nodes.
var KwokToleration = corev1.Toleration{Key: KwokTaint.Key, Operator: corev1.TolerationOpExists, Effect: KwokTaint.Effect}

// NodeSpec describes one simulated GPU node.
type NodeSpec struct {
	Name   string
	GPUs   int64
	Labels map[string]string
	// Taints of the node; none by default.
	Taints []corev1.Taint
}

// Resources is what AddKwokNodes publishes as n's capacity and
// allocatable: 64 CPUs, 512Gi of memory and 110 pods whatever its GPUs,
// and n.GPUs.
func (n NodeSpec) Resources() corev1.ResourceList {
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("512Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	if n.GPUs > 0 {
		res[GPUResource] = *resource.NewQuantity(n.GPUs, resource.DecimalSI)
	}
	return res
}

// Capacity is the sum of the nodes' Resources: what a ClusterQueue whose
// flavor they serve can hold, so its quota is sized from it.
func Capacity(nodes ...NodeSpec) corev1.ResourceList {
	sum := corev1.ResourceList{}
	for _, n := range nodes {
		for name, q := range n.Resources() {
			total := sum[name]
			total.Add(q)
			sum[name] = total
		}
	}
	return sum
}

// AddKwokNodes creates simulated nodes that kwok makes Ready. They carry
// no taint unless NodeSpec.Taints names some, so pods of any runtime
// schedule onto them.
func (c *Cluster) AddKwokNodes(ctx context.Context, nodes ...NodeSpec) error {
	for _, n := range nodes {
		labels := map[string]string{"type": "kwok", "kubernetes.io/hostname": n.Name}
		for k, v := range n.Labels {
			labels[k] = v
		}
		res := n.Resources()
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:        n.Name,
				Labels:      labels,
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
			},
			Spec:   corev1.NodeSpec{Taints: n.Taints},
			Status: corev1.NodeStatus{Capacity: res, Allocatable: res},
		}
		if err := c.Client.Create(ctx, node); err != nil {
			return fmt.Errorf("create node %s: %w", n.Name, err)
		}
	}
	return nil
}

// RackNodes is racks of n nodes of gpus GPUs each, labelled with their rack
// under rackLabel and named gpu-<rack>-a, gpu-<rack>-b, ...
func RackNodes(rackLabel string, n int, gpus int64, racks ...string) []NodeSpec {
	var out []NodeSpec
	for _, r := range racks {
		for i := range n {
			out = append(out, NodeSpec{Name: fmt.Sprintf("gpu-%s-%c", r, 'a'+i), GPUs: gpus, Labels: map[string]string{rackLabel: r}})
		}
	}
	return out
}

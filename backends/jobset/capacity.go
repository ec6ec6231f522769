package jobset

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
)

const (
	// GPUResource is the GPU resource Capacity counts per node.
	GPUResource corev1.ResourceName = "nvidia.com/gpu"
	// HostnameLevel is the node level every topology ends with.
	HostnameLevel = corev1.LabelHostname
)

// trackedResources are the resources Capacity reports.
var trackedResources = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, GPUResource}

// Capacity sums what the nodes can allocate and what the non-terminal pods
// bound to them request, and groups the nodes' free GPUs by topology
// domain. A cordoned or NotReady node is there but takes no work now: it
// counts in the totals, the largest node and the topology (what could ever
// fit) with nothing free (what fits now), as Slurm's drained and down nodes
// do, so a node out for maintenance makes jobs wait, never refused.
func (b *Backend) Capacity(ctx context.Context) (*backends.Capacity, error) {
	var nodes corev1.NodeList
	if err := b.c.List(ctx, &nodes); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	var pods corev1.PodList
	if err := b.c.List(ctx, &pods); err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	return capacityOf(nodes.Items, pods.Items, b.opts.TopologyLevels), nil
}

// nodeUse is one node's allocatable and free resources (none free on a node
// that takes no work now).
type nodeUse struct {
	node  *corev1.Node
	alloc corev1.ResourceList
	free  corev1.ResourceList
}

// capacityOf is Capacity without the client, for tests.
func capacityOf(nodes []corev1.Node, pods []corev1.Pod, levels []string) *backends.Capacity {
	used := requestsByNode(pods)
	var reported []nodeUse
	for i := range nodes {
		n := &nodes[i]
		if n.DeletionTimestamp != nil {
			continue // going away for good
		}
		alloc := tracked(n.Status.Allocatable)
		free := subtract(alloc, used[n.Name])
		if !schedulableNow(n) {
			free = subtract(alloc, alloc)
		}
		reported = append(reported, nodeUse{node: n, alloc: alloc, free: free})
	}
	slices.SortFunc(reported, func(a, b nodeUse) int { return strings.Compare(a.node.Name, b.node.Name) })
	total, free := corev1.ResourceList{}, corev1.ResourceList{}
	var maxGPUs int64
	for _, u := range reported {
		add(total, u.alloc)
		add(free, u.free)
		gpus := u.alloc[GPUResource]
		maxGPUs = max(maxGPUs, gpus.Value())
	}
	return &backends.Capacity{Capacity: total, Free: free, MaxGPUsPerNode: maxGPUs, Topology: topology(reported, levels)}
}

// schedulableNow: the node takes new pods now (not cordoned, Ready).
func schedulableNow(n *corev1.Node) bool {
	if n.Spec.Unschedulable {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// requestsByNode sums the effective requests (init containers, sidecars and
// overhead counted as the scheduler counts them) of pods still holding
// their node's resources.
func requestsByNode(pods []corev1.Pod) map[string]corev1.ResourceList {
	used := map[string]corev1.ResourceList{}
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if used[p.Spec.NodeName] == nil {
			used[p.Spec.NodeName] = corev1.ResourceList{}
		}
		add(used[p.Spec.NodeName], tracked(resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})))
	}
	return used
}

func tracked(in corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, r := range trackedResources {
		if q, ok := in[r]; ok {
			out[r] = q.DeepCopy()
		}
	}
	return out
}

func add(into, l corev1.ResourceList) {
	for r, q := range l {
		sum := into[r]
		sum.Add(q)
		into[r] = sum
	}
}

// subtract is alloc minus used per resource, never below zero: pods bound
// before a node shrank can over-commit it.
func subtract(alloc, used corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{}
	for r, q := range alloc {
		left := q.DeepCopy()
		if u, ok := used[r]; ok {
			left.Sub(u)
		}
		if left.Sign() < 0 {
			left = *resource.NewQuantity(0, q.Format)
		}
		out[r] = left
	}
	return out
}

// topology groups nodes (already sorted by name) into the leaf domains
// above the node level. A node missing one of the levels' labels cannot be
// targeted by the affinity Render writes, so it is counted in the totals but
// in no domain.
func topology(nodes []nodeUse, levels []string) *v1alpha1.TopologyStatus {
	above := slices.DeleteFunc(slices.Clone(levels), func(l string) bool { return l == HostnameLevel })
	st := &v1alpha1.TopologyStatus{Levels: append(slices.Clone(above), HostnameLevel)}
	index := map[string]int{}
	for _, n := range nodes {
		values, ok := domainValues(n.node, above)
		if !ok {
			continue
		}
		key := strings.Join(values, "\x00")
		i, seen := index[key]
		if !seen {
			i = len(st.Domains)
			index[key] = i
			st.Domains = append(st.Domains, v1alpha1.TopologyDomain{Values: values})
		}
		gpus := n.free[GPUResource]
		st.Domains[i].Nodes = append(st.Domains[i].Nodes, n.node.Name)
		st.Domains[i].FreeGPUsPerNode = append(st.Domains[i].FreeGPUsPerNode, int32(gpus.Value()))
	}
	slices.SortFunc(st.Domains, func(a, b v1alpha1.TopologyDomain) int { return slices.Compare(a.Values, b.Values) })
	return st
}

func domainValues(n *corev1.Node, levels []string) ([]string, bool) {
	values := make([]string, 0, len(levels))
	for _, l := range levels {
		v, ok := n.Labels[l]
		if !ok {
			return nil, false
		}
		values = append(values, v)
	}
	return values, true
}

package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/hub/admissioncheck"
)

// Queue is a Kueue ClusterQueue with trainyard's admission check and one
// LocalQueue. Its one flavor's quotas are GPUs and, when both are set, CPU
// and Memory.
type Queue struct {
	ClusterQueue string
	Namespace    string
	LocalQueue   string
	Flavor       string
	GPUs         string
	// CPU and Memory, when set, make the ClusterQueue cover cpu, memory
	// and GPUs in one resource group, as sites do: a pod set requesting
	// any of them is admitted with the flavor. Unset, it covers GPUs only:
	// a job requesting nothing is admitted with no flavor, and one
	// requesting CPU or memory is never admitted ("resource cpu
	// unavailable in ClusterQueue").
	CPU    string
	Memory string
}

// QueueFor is q with the quotas of capacity (fleet.Capacity of the nodes
// its flavor's targets have): GPUs, CPU and memory.
func QueueFor(q Queue, capacity corev1.ResourceList) Queue {
	q.GPUs = quantity(capacity, v1alpha1.GPUResource)
	q.CPU = quantity(capacity, corev1.ResourceCPU)
	q.Memory = quantity(capacity, corev1.ResourceMemory)
	return q
}

func quantity(l corev1.ResourceList, name corev1.ResourceName) string {
	q, ok := l[name]
	if !ok {
		return "0"
	}
	return q.String()
}

// CheckName is the AdmissionCheck SetUpQueue creates.
const CheckName = "trainyard"

// SetUpQueue creates (or keeps) the AdmissionCheck, the flavor, and q's
// ClusterQueue and LocalQueue.
func SetUpQueue(ctx context.Context, h *fleet.Cluster, q Queue) error {
	if err := h.EnsureNamespace(ctx, q.Namespace); err != nil {
		return err
	}
	quotas, err := q.quotas()
	if err != nil {
		return err
	}
	rg := kueue.ResourceGroup{Flavors: []kueue.FlavorQuotas{{Name: kueue.ResourceFlavorReference(q.Flavor), Resources: quotas}}}
	for _, r := range quotas {
		rg.CoveredResources = append(rg.CoveredResources, r.Name)
	}
	objs := []client.Object{
		&kueue.AdmissionCheck{
			ObjectMeta: metav1.ObjectMeta{Name: CheckName},
			Spec:       kueue.AdmissionCheckSpec{ControllerName: admissioncheck.ControllerName},
		},
		&kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: q.Flavor}},
		&kueue.ClusterQueue{
			ObjectMeta: metav1.ObjectMeta{Name: q.ClusterQueue},
			Spec: kueue.ClusterQueueSpec{
				NamespaceSelector: &metav1.LabelSelector{},
				QueueingStrategy:  kueue.BestEffortFIFO,
				FlavorFungibility: &kueue.FlavorFungibility{WhenCanBorrow: kueue.MayStopSearch, WhenCanPreempt: kueue.TryNextFlavor},
				ResourceGroups:    []kueue.ResourceGroup{rg},
				AdmissionChecksStrategy: &kueue.AdmissionChecksStrategy{
					AdmissionChecks: []kueue.AdmissionCheckStrategyRule{{Name: CheckName}},
				},
			},
		},
		&kueue.LocalQueue{
			ObjectMeta: metav1.ObjectMeta{Name: q.LocalQueue, Namespace: q.Namespace},
			Spec:       kueue.LocalQueueSpec{ClusterQueue: kueue.ClusterQueueReference(q.ClusterQueue)},
		},
	}
	for _, obj := range objs {
		if err := h.Client.Create(ctx, obj); client.IgnoreAlreadyExists(err) != nil {
			return err
		}
	}
	return nil
}

// quotas are q's nominal quotas: cpu and memory when set, then GPUs.
func (q Queue) quotas() ([]kueue.ResourceQuota, error) {
	if (q.CPU == "") != (q.Memory == "") {
		return nil, fmt.Errorf("queue %s: CPU %q and memory %q: set both or neither, or jobs requesting the other wait forever", q.ClusterQueue, q.CPU, q.Memory)
	}
	var out []kueue.ResourceQuota
	for _, r := range []struct {
		name  corev1.ResourceName
		value string
	}{{corev1.ResourceCPU, q.CPU}, {corev1.ResourceMemory, q.Memory}, {v1alpha1.GPUResource, q.GPUs}} {
		if r.value == "" && r.name != v1alpha1.GPUResource {
			continue
		}
		v, err := resource.ParseQuantity(r.value)
		if err != nil {
			return nil, fmt.Errorf("queue %s: %s quota %q: %w", q.ClusterQueue, r.name, r.value, err)
		}
		out = append(out, kueue.ResourceQuota{Name: r.name, NominalQuota: v})
	}
	return out, nil
}

package controllers

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

func TestQueueQuotas(t *testing.T) {
	quota := func(name corev1.ResourceName, v string) kueue.ResourceQuota {
		return kueue.ResourceQuota{Name: name, NominalQuota: resource.MustParse(v)}
	}
	for _, tc := range []struct {
		name    string
		q       Queue
		want    []kueue.ResourceQuota
		wantErr string
	}{
		{name: "GPUs only", q: Queue{GPUs: "16"}, want: []kueue.ResourceQuota{quota(v1alpha1.GPUResource, "16")}},
		{name: "as sites set them", q: Queue{GPUs: "16", CPU: "128", Memory: "1Ti"},
			want: []kueue.ResourceQuota{quota(corev1.ResourceCPU, "128"), quota(corev1.ResourceMemory, "1Ti"), quota(v1alpha1.GPUResource, "16")}},
		{name: "CPU without memory", q: Queue{ClusterQueue: "cq", GPUs: "16", CPU: "128"}, wantErr: "set both or neither"},
		{name: "bad quantity", q: Queue{ClusterQueue: "cq", GPUs: "16", CPU: "lots", Memory: "1Ti"}, wantErr: `queue cq: cpu quota "lots"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.q.quotas()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("quotas (-want +got):\n%s", diff)
			}
		})
	}
}

func TestQueueFor(t *testing.T) {
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("128"), corev1.ResourceMemory: resource.MustParse("1Ti"),
		corev1.ResourcePods: resource.MustParse("220"), v1alpha1.GPUResource: resource.MustParse("16")}
	want := Queue{ClusterQueue: "cq", Flavor: "f", GPUs: "16", CPU: "128", Memory: "1Ti"}
	if diff := cmp.Diff(want, QueueFor(Queue{ClusterQueue: "cq", Flavor: "f"}, capacity)); diff != "" {
		t.Errorf("QueueFor (-want +got):\n%s", diff)
	}
}

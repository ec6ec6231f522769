package dashboard

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueuetesting "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"
)

// cq is a ClusterQueue in cohort with a GPU quota of nominal on flavor
// h100, and usage used (borrowed of it) and reservation reserved.
func cq(name, cohort, nominal, used, borrowed, reserved string) kueue.ClusterQueue {
	w := kueuetesting.MakeClusterQueue(name).ResourceGroup(*kueuetesting.MakeFlavorQuotas("h100").Resource("nvidia.com/gpu", nominal).Obj())
	if cohort != "" {
		w = w.Cohort(kueue.CohortReference(cohort))
	}
	q := *w.Obj()
	usage := func(total string) []kueue.FlavorUsage {
		return []kueue.FlavorUsage{{Name: "h100", Resources: []kueue.ResourceUsage{
			{Name: "nvidia.com/gpu", Total: resource.MustParse(total), Borrowed: resource.MustParse(borrowed)}}}}
	}
	q.Status.FlavorsUsage, q.Status.FlavorsReservation = usage(used), usage(reserved)
	q.Status.AdmittedWorkloads, q.Status.PendingWorkloads = 1, 2
	return q
}

func gpuUsage(nominal, used, reserved, borrowed string, usedPct, reservedPct int, over bool) UsageView {
	return UsageView{Flavor: "h100", Resource: "nvidia.com/gpu", Nominal: nominal, Used: used, Reserved: reserved, Borrowed: borrowed,
		UsedPercent: usedPct, ReservedPercent: reservedPct, UsedWide: min(usedPct, 100), ReservedWide: min(reservedPct, 100), Over: over}
}

func TestQuota(t *testing.T) {
	cases := map[string]struct {
		cqs  []kueue.ClusterQueue
		want []CohortView
	}{
		"cohort totals; queues in no cohort last": {
			cqs: []kueue.ClusterQueue{
				cq("solo", "", "8", "2", "0", "4"),
				cq("team-b", "research", "16", "20", "4", "20"),
				cq("team-a", "research", "16", "8", "0", "12"),
			},
			want: []CohortView{
				{Name: "research",
					Totals: []UsageView{gpuUsage("32", "28", "32", "4", 87, 100, false)},
					Queues: []QueueView{
						{Name: "team-a", Pending: 2, Admitted: 1, Usage: []UsageView{gpuUsage("16", "8", "12", "0", 50, 75, false)}},
						{Name: "team-b", Pending: 2, Admitted: 1, Usage: []UsageView{gpuUsage("16", "20", "20", "4", 125, 125, true)}},
					}},
				{Queues: []QueueView{{Name: "solo", Pending: 2, Admitted: 1, Usage: []UsageView{gpuUsage("8", "2", "4", "0", 25, 50, false)}}}},
			},
		},
		"usage of a resource without quota is over": {
			cqs: func() []kueue.ClusterQueue {
				q := cq("cpu-only", "", "0", "3", "0", "3")
				q.Spec.ResourceGroups[0].Flavors[0].Resources[0].Name = corev1.ResourceCPU
				return []kueue.ClusterQueue{q}
			}(),
			want: []CohortView{{Queues: []QueueView{{Name: "cpu-only", Pending: 2, Admitted: 1, Usage: []UsageView{
				{Flavor: "h100", Resource: "cpu", Nominal: "0", Used: "0", Reserved: "0", Borrowed: "0"},
				gpuUsage("0", "3", "3", "0", 100, 100, true),
			}}}}},
		},
		"no ClusterQueues": {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, buildQuota(tc.cqs)); diff != "" {
				t.Errorf("quota (-want +got):\n%s", diff)
			}
		})
	}
}

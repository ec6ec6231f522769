package dashboard

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/hubview"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

var now = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

const rack = "topology.kubernetes.io/rack"

// spoke is a target with two racks of two 8-GPU nodes: 8+4 free on
// rack-a, none on rack-b.
func spoke() *v1alpha1.Target {
	t := tytesting.MakeKubernetesTarget("spoke-1", "h100").Obj()
	t.Status = v1alpha1.TargetStatus{
		LastHeartbeatTime: &metav1.Time{Time: now.Add(-15 * time.Second)},
		Capacity:          corev1.ResourceList{v1alpha1.GPUResource: resource.MustParse("32")}, FreeGPUs: 12, MaxGPUsPerNode: 8,
		Conditions: []metav1.Condition{{Type: v1alpha1.TargetAvailable, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonHeartbeatFresh, Message: "fresh"}},
		Topology: &v1alpha1.TopologyStatus{Levels: []string{rack, "kubernetes.io/hostname"}, Domains: []v1alpha1.TopologyDomain{
			{Values: []string{"rack-a"}, Nodes: []string{"n1", "n2"}, FreeGPUsPerNode: []int32{8, 4}},
			{Values: []string{"rack-b"}, Nodes: []string{"n3", "n4"}, FreeGPUsPerNode: []int32{0, 0}},
		}},
	}
	return t
}

// job is a job summary on target in phase, with one pod set placed by
// topology assignment a (nil: anywhere).
func job(name, target, phase string, a *v1alpha1.TopologyAssignment) hubview.JobInfo {
	j := hubview.JobInfo{JobSummary: hubview.JobSummary{Namespace: "team-a", Name: name, Queue: "lq", Target: target, Phase: phase, Attempt: 1,
		Created: metav1.Time{Time: now.Add(-time.Hour)}}}
	if target != "" {
		j.PodSets = []v1alpha1.PodSetPlacement{{Name: "node", Count: 2, GPUsPerPod: 4, Topology: a}}
	}
	return j
}

func inRack(values ...[]string) *v1alpha1.TopologyAssignment {
	a := &v1alpha1.TopologyAssignment{Levels: []string{rack}}
	for _, v := range values {
		a.Domains = append(a.Domains, v1alpha1.TopologyDomainAssignment{Values: v, Count: 1})
		if len(v) > 1 {
			a.Levels = []string{rack, "kubernetes.io/hostname"}
		}
	}
	return a
}

func TestFleetCells(t *testing.T) {
	cases := map[string]struct {
		target      *v1alpha1.Target
		jobs        []hubview.JobInfo
		wantDomains []DomainView
	}{
		"free and used per node, node size from maxGPUsPerNode": {
			target: spoke(),
			wantDomains: []DomainView{
				{Label: "rack-a", X: 0, Y: 0, W: 96, H: 50, Free: 12, Used: 4, Cells: []CellView{
					{Node: "n1", X: 8, Y: 24, Free: 8, Used: 0, Total: 8, UsedY: 42, UsedH: 0},
					{Node: "n2", X: 29, Y: 24, Free: 4, Used: 4, Total: 8, UsedY: 33, UsedH: 9},
				}},
				{Label: "rack-b", X: 108, Y: 0, W: 96, H: 50, Free: 0, Used: 16, Cells: []CellView{
					{Node: "n3", X: 116, Y: 24, Free: 0, Used: 8, Total: 8, UsedY: 24, UsedH: 18},
					{Node: "n4", X: 137, Y: 24, Free: 0, Used: 8, Total: 8, UsedY: 24, UsedH: 18},
				}},
			},
		},
		"a job in rack-b marks the domain, a finished one does not": {
			target: spoke(),
			jobs: []hubview.JobInfo{
				job("llama", "spoke-1", "Running", inRack([]string{"rack-b"})),
				job("old", "spoke-1", "Succeeded", inRack([]string{"rack-a"})),
			},
			wantDomains: []DomainView{
				{Label: "rack-a", Cells: []CellView{{Node: "n1"}, {Node: "n2"}}},
				{Label: "rack-b", Jobs: 1, Cells: []CellView{{Node: "n3", Job: true}, {Node: "n4", Job: true}}},
			},
		},
		"a job placed node by node marks only its nodes": {
			target: spoke(),
			jobs:   []hubview.JobInfo{job("llama", "spoke-1", "Submitted", inRack([]string{"rack-a", "n2"}))},
			wantDomains: []DomainView{
				{Label: "rack-a", Jobs: 1, Cells: []CellView{{Node: "n1"}, {Node: "n2", Job: true}}},
				{Label: "rack-b", Cells: []CellView{{Node: "n3"}, {Node: "n4"}}},
			},
		},
		"a job on another target marks nothing": {
			target: spoke(),
			jobs:   []hubview.JobInfo{job("sim", "hpc", "Running", inRack([]string{"rack-a"}))},
			wantDomains: []DomainView{
				{Label: "rack-a", Cells: []CellView{{Node: "n1"}, {Node: "n2"}}},
				{Label: "rack-b", Cells: []CellView{{Node: "n3"}, {Node: "n4"}}},
			},
		},
		"no levels above the node: one box; size from capacity": {
			target: func() *v1alpha1.Target {
				t := spoke()
				t.Status.MaxGPUsPerNode = 0
				t.Status.Capacity = corev1.ResourceList{v1alpha1.GPUResource: resource.MustParse("12")}
				t.Status.Topology = &v1alpha1.TopologyStatus{Levels: []string{"kubernetes.io/hostname"}, Domains: []v1alpha1.TopologyDomain{
					{Values: []string{}, Nodes: []string{"a", "b", "c"}, FreeGPUsPerNode: []int32{1, 2, 4}},
				}}
				return t
			}(),
			wantDomains: []DomainView{{Label: "all nodes", W: 96, H: 50, Free: 7, Used: 5, Cells: []CellView{
				{Node: "a", X: 8, Y: 24, Free: 1, Used: 3, Total: 4, UsedY: 29, UsedH: 13},
				{Node: "b", X: 29, Y: 24, Free: 2, Used: 2, Total: 4, UsedY: 33, UsedH: 9},
				{Node: "c", X: 50, Y: 24, Free: 4, Used: 0, Total: 4, UsedY: 42},
			}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := buildFleet([]v1alpha1.Target{*tc.target}, tc.jobs, now)
			if len(got) != 1 {
				t.Fatalf("got %d targets, want 1", len(got))
			}
			// Cases that look at marks only leave the geometry zero.
			opts := cmp.Options{}
			if tc.wantDomains[0].H == 0 {
				opts = append(opts, cmpopts.IgnoreFields(DomainView{}, "X", "Y", "W", "H", "Free", "Used"),
					cmpopts.IgnoreFields(CellView{}, "X", "Y", "Free", "Used", "Total", "UsedY", "UsedH"))
			}
			if diff := cmp.Diff(tc.wantDomains, got[0].Map.Domains, opts); diff != "" {
				t.Errorf("domains (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFleetTargets(t *testing.T) {
	stale := tytesting.MakeSlurmTarget("hpc", "h100", "gpu").Obj()
	stale.Status.Conditions = []metav1.Condition{{Type: v1alpha1.TargetAvailable, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonHeartbeatStale, Message: "no heartbeat for 10m"}}
	stale.Status.LastHeartbeatTime = &metav1.Time{Time: now.Add(-10 * time.Minute)}
	fresh := tytesting.MakeKubernetesTarget("new", "h100").Obj()
	fresh.Spec.Paused = true
	jobs := []hubview.JobInfo{
		job("llama", "spoke-1", "Running", inRack([]string{"rack-a"})),
		job("queued", "", "Pending", nil),
		// No Dispatch readable: the target comes from the condition.
		{JobSummary: hubview.JobSummary{Namespace: "team-b", Name: "sim", Phase: "Running"}, Conditions: []metav1.Condition{
			{Type: "Running", Status: metav1.ConditionTrue, Message: "running on target hpc (attempt 3)"}}},
	}
	got := buildFleet([]v1alpha1.Target{*stale, *spoke(), *fresh}, jobs, now)
	want := []TargetView{
		{Name: "hpc", Type: "Slurm", Available: "False", AvailableReason: v1alpha1.ReasonHeartbeatStale, AvailableMessage: "no heartbeat for 10m",
			Heartbeat: "10m ago", Jobs: []PlacedJob{{Namespace: "team-b", Name: "sim", Phase: "Running"}}},
		{Name: "new", Type: "Kubernetes", Available: "Unknown", Paused: true, Heartbeat: "never"},
		{Name: "spoke-1", Type: "Kubernetes", Available: "True", AvailableReason: v1alpha1.ReasonHeartbeatFresh, AvailableMessage: "fresh",
			Heartbeat: "15s ago", FreeGPUs: 12, UsedGPUs: 20, TotalGPUs: 32, HasCapacity: true, Levels: []string{rack, "kubernetes.io/hostname"},
			Jobs: []PlacedJob{{Namespace: "team-a", Name: "llama", Phase: "Running", Pods: 2, Domains: []string{"rack-a"}}}},
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(TargetView{}, "Map")); diff != "" {
		t.Errorf("targets (-want +got):\n%s", diff)
	}
}

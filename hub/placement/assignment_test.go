package placement

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

func TestPodSetTopology(t *testing.T) {
	if RequiredTopologyAnnotation != kueue.PodSetRequiredTopologyAnnotation ||
		PreferredTopologyAnnotation != kueue.PodSetPreferredTopologyAnnotation {
		t.Fatalf("annotation keys differ from Kueue's")
	}
	cases := map[string]struct {
		annotations         map[string]string
		required, preferred string
	}{
		"none":                {},
		"required":            {annotations: map[string]string{RequiredTopologyAnnotation: rack}, required: rack},
		"preferred":           {annotations: map[string]string{PreferredTopologyAnnotation: block}, preferred: block},
		"trainyard required":  {annotations: map[string]string{v1alpha1.AnnotationPodSetRequiredTopology: rack}, required: rack},
		"trainyard preferred": {annotations: map[string]string{v1alpha1.AnnotationPodSetPreferredTopology: block}, preferred: block},
		"trainyard's wins over Kueue's": {annotations: map[string]string{
			RequiredTopologyAnnotation: block, v1alpha1.AnnotationPodSetPreferredTopology: rack}, preferred: rack},
		"unconstrained": {annotations: map[string]string{
			kueue.PodSetUnconstrainedTopologyAnnotation: "true", "other": rack,
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r, p := PodSetTopology(tc.annotations)
			if r != tc.required || p != tc.preferred {
				t.Errorf("PodSetTopology = %q, %q, want %q, %q", r, p, tc.required, tc.preferred)
			}
		})
	}
}

// TestDecisionApply: the decision fills the Dispatch's pod sets by name,
// node by node, and the reservations read back from them are the decision's.
func TestDecisionApply(t *testing.T) {
	req := request(required(rack, podSet(3, 4)), PodSet{Name: "launcher", Count: 1})
	d, err := Choose(req, []Candidate{cand(racks(target("a"), rk("b1", "r1", 8, 4), rk("b2", "r2", 2)))})
	if err != nil {
		t.Fatal(err)
	}
	placements := []v1alpha1.PodSetPlacement{{Name: "launcher", Count: 1}, {Name: "node", Count: 3}}
	d.Apply(placements)
	want := []v1alpha1.PodSetPlacement{
		{Name: "launcher", Count: 1},
		{Name: "node", Count: 3, Topology: &v1alpha1.TopologyAssignment{
			Levels: []string{block, rack, host},
			Domains: []v1alpha1.TopologyDomainAssignment{
				{Values: []string{"b1", "r1", "r1-n0"}, Count: 2},
				{Values: []string{"b1", "r1", "r1-n1"}, Count: 1},
			},
		}},
	}
	if diff := cmp.Diff(want, placements); diff != "" {
		t.Errorf("placements (-want +got):\n%s", diff)
	}
	wantRes := []Reservation{{Node: "r1-n0", GPUs: 8}, {Node: "r1-n1", GPUs: 4}}
	if diff := cmp.Diff(wantRes, d.Reservations()); diff != "" {
		t.Errorf("Reservations (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantRes, ReservationsOf(placements[1].Topology, 4, host)); diff != "" {
		t.Errorf("ReservationsOf (-want +got):\n%s", diff)
	}
	if got := ReservationsOf(placements[1].Topology, 4, rack); got != nil {
		t.Errorf("ReservationsOf with another node level = %v, want nil", got)
	}
}

// TestUnconstrainedAssignmentIsAdvisory: a pod set that asked for no
// topology gets its nodes written as an advisory assignment (backends leave
// the remote scheduler to place it), which still books its GPUs; one that
// asked for a level is bound.
func TestUnconstrainedAssignmentIsAdvisory(t *testing.T) {
	for name, tc := range map[string]struct {
		ps       PodSet
		advisory bool
	}{
		"no topology asked": {ps: podSet(2, 4), advisory: true},
		"a required rack":   {ps: required(rack, podSet(2, 4))},
		"a preferred block": {ps: preferred(block, podSet(2, 4))},
	} {
		t.Run(name, func(t *testing.T) {
			d, err := Choose(request(tc.ps), []Candidate{cand(racks(target("a"), rk("b1", "r1", 8, 4)))})
			if err != nil {
				t.Fatal(err)
			}
			placements := []v1alpha1.PodSetPlacement{{Name: "node", Count: 2}}
			d.Apply(placements)
			topo := placements[0].Topology
			if topo == nil {
				t.Fatal("no topology written")
			}
			if topo.Advisory != tc.advisory {
				t.Errorf("advisory = %v, want %v", topo.Advisory, tc.advisory)
			}
			if diff := cmp.Diff(d.Reservations(), ReservationsOf(topo, 4, host)); diff != "" {
				t.Errorf("the written assignment books other GPUs than the decision (-decision +written):\n%s", diff)
			}
		})
	}
}

// TestAssignmentTopologyWidens: more domains than the API holds are merged
// a level up.
func TestAssignmentTopologyWidens(t *testing.T) {
	a := PodSetAssignment{Name: "node", GPUsPerPod: 8, Levels: []string{block, rack, host}}
	for i := range 1200 {
		r := fmt.Sprintf("r%02d", i/100)
		a.Domains = append(a.Domains, DomainCount{Values: []string{"b1", r, fmt.Sprintf("%s-n%03d", r, i%100)}, Count: 1})
	}
	got := a.Topology()
	want := &v1alpha1.TopologyAssignment{Levels: []string{block, rack}, Advisory: true}
	for i := range 12 {
		want.Domains = append(want.Domains, v1alpha1.TopologyDomainAssignment{Values: []string{"b1", fmt.Sprintf("r%02d", i)}, Count: 100})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Topology (-want +got):\n%s", diff)
	}
	if got := (PodSetAssignment{Name: "node"}).Topology(); got != nil {
		t.Errorf("Topology of an empty assignment = %v, want nil", got)
	}
}

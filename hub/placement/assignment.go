package placement

import (
	"slices"
	"sort"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// Kueue's pod-set topology annotations (kueue.x-k8s.io/v1beta2
// PodSetRequiredTopologyAnnotation and PodSetPreferredTopologyAnnotation).
const (
	RequiredTopologyAnnotation  = "kueue.x-k8s.io/podset-required-topology"
	PreferredTopologyAnnotation = "kueue.x-k8s.io/podset-preferred-topology"
)

// PodSetTopology reads a pod template's topology annotations: the levels
// for PodSet.Required and PodSet.Preferred. Both empty is unconstrained.
// trainyard's annotations (v1alpha1.AnnotationPodSetRequiredTopology and
// AnnotationPodSetPreferredTopology) win over Kueue's.
func PodSetTopology(annotations map[string]string) (required, preferred string) {
	required, preferred = annotations[RequiredTopologyAnnotation], annotations[PreferredTopologyAnnotation]
	if v := annotations[v1alpha1.AnnotationPodSetRequiredTopology]; v != "" {
		required, preferred = v, ""
	}
	if v := annotations[v1alpha1.AnnotationPodSetPreferredTopology]; v != "" && annotations[v1alpha1.AnnotationPodSetRequiredTopology] == "" {
		required, preferred = "", v
	}
	return required, preferred
}

// PodSetAssignment is where placement put one pod set on the chosen target.
type PodSetAssignment struct {
	Name       string
	GPUsPerPod int64
	// Level is the level of the one domain that holds every pod: the
	// required level, or the level a preferred pod set was met at. Empty
	// when the pods spread over the target.
	Level string
	// Domain are the values of that domain, widest first, down to Level.
	Domain []string
	// Levels the values of Domains refer to: the target's levels down to
	// the node level. Pods without GPUs go into Level's domain, not onto
	// nodes; when the target does not name its nodes the levels stop above
	// the node.
	Levels []string
	// Domains with their pod counts, in the order of their values.
	Domains []DomainCount
	// Nodes are the node of each entry of Domains when Levels end at the
	// node level; nil otherwise.
	Nodes []string
}

// DomainCount is a count of pods placed in one domain.
type DomainCount struct {
	Values []string
	Count  int32
}

// maxAssignmentDomains is TopologyAssignment's MaxItems for domains.
const maxAssignmentDomains = 1000

// Topology is the assignment as the Dispatch API writes it; nil when the
// pods may go anywhere on the target, advisory when they may but the hub
// booked their GPUs on particular nodes. An assignment of more domains than
// the API holds is widened a level at a time until it fits.
func (a PodSetAssignment) Topology() *v1alpha1.TopologyAssignment {
	levels, domains := a.Levels, a.Domains
	for len(domains) > maxAssignmentDomains && len(levels) > 1 {
		levels, domains = widen(levels, domains)
	}
	if len(domains) == 0 || len(domains) > maxAssignmentDomains {
		return nil
	}
	// A pod set placed at no level asked for no topology (PodSet.Required
	// and Preferred empty): its domains are a booking, not a bound.
	out := &v1alpha1.TopologyAssignment{Levels: slices.Clone(levels), Advisory: a.Level == ""}
	for _, d := range domains {
		out.Domains = append(out.Domains, v1alpha1.TopologyDomainAssignment{Values: slices.Clone(d.Values), Count: d.Count})
	}
	return out
}

// widen drops the narrowest level, merging the domains it told apart;
// domains sorted by values stay sorted.
func widen(levels []string, domains []DomainCount) ([]string, []DomainCount) {
	k := len(levels) - 1
	var out []DomainCount
	for _, d := range domains {
		if n := len(out); n > 0 && slices.Equal(out[n-1].Values, d.Values[:k]) {
			out[n-1].Count += d.Count
			continue
		}
		out = append(out, DomainCount{Values: d.Values[:k:k], Count: d.Count})
	}
	return levels[:k], out
}

// Apply sets the topology of each placement from the assignment of the pod
// set of the same name. Placements of a decision without assignments (a
// target that publishes no nodes) are left as they are.
func (d Decision) Apply(placements []v1alpha1.PodSetPlacement) {
	for i := range placements {
		for _, a := range d.PodSets {
			if a.Name == placements[i].Name {
				placements[i].Topology = a.Topology()
			}
		}
	}
}

// Reservations are the GPUs the decision books on each node, by node name.
// Pass them as Candidate.InFlight of later decisions on the same target
// until its heartbeat counts them.
func (d Decision) Reservations() []Reservation {
	booked := map[string]int64{}
	for _, a := range d.PodSets {
		for i, node := range a.Nodes {
			booked[node] += int64(a.Domains[i].Count) * a.GPUsPerPod
		}
	}
	return sortedReservations(booked)
}

// ReservationsOf reads the reservations back from a pod set's written
// assignment, such as a Dispatch's spec, when its levels end at the
// target's node level (the last of its TopologyStatus.Levels).
func ReservationsOf(t *v1alpha1.TopologyAssignment, gpusPerPod int64, nodeLevel string) []Reservation {
	if t == nil || gpusPerPod == 0 || len(t.Levels) == 0 || t.Levels[len(t.Levels)-1] != nodeLevel {
		return nil
	}
	booked := map[string]int64{}
	for _, d := range t.Domains {
		if len(d.Values) > 0 {
			booked[d.Values[len(d.Values)-1]] += int64(d.Count) * gpusPerPod
		}
	}
	return sortedReservations(booked)
}

func sortedReservations(booked map[string]int64) []Reservation {
	var out []Reservation
	for node, gpus := range booked {
		if gpus > 0 {
			out = append(out, Reservation{Node: node, GPUs: gpus})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// assignment turns a plan into the pod set's assignment.
func (v *view) assignment(ps PodSet, p plan) PodSetAssignment {
	a := PodSetAssignment{Name: ps.Name, GPUsPerPod: ps.GPUsPerPod}
	if p.level >= 0 {
		a.Level = v.levels[p.level]
		a.Domain = v.domainValues(p.level, p.first)
	}
	nodeLevel := len(v.levels) - 1
	switch {
	case len(p.pods) > 0 && v.named:
		a.Levels = slices.Clone(v.levels)
		pods := slices.Clone(p.pods)
		slices.SortFunc(pods, func(x, y onNode) int { return x.node - y.node })
		for _, on := range pods {
			a.Domains = append(a.Domains, DomainCount{Values: v.domainValues(nodeLevel, on.node), Count: on.count})
			a.Nodes = append(a.Nodes, v.name(on.node))
		}
	case len(p.pods) > 0 && v.nLeaf > 0:
		a.Levels = slices.Clone(v.levels[:v.nLeaf])
		pods := slices.Clone(p.pods)
		slices.SortFunc(pods, func(x, y onNode) int { return x.node - y.node })
		last := -1
		for _, on := range pods {
			if l := v.leafOf(on.node); l != last {
				a.Domains = append(a.Domains, DomainCount{Values: slices.Clone(v.leafVals[l])})
				last = l
			}
			a.Domains[len(a.Domains)-1].Count += on.count
		}
	case len(p.pods) == 0 && p.level >= 0 && len(a.Domain) > 0:
		// Pods without GPUs: the domain, not nodes.
		a.Levels = slices.Clone(v.levels[:len(a.Domain)])
		a.Domains = []DomainCount{{Values: slices.Clone(a.Domain), Count: ps.Count}}
		if len(a.Domain) == len(v.levels) {
			a.Nodes = []string{a.Domain[nodeLevel]}
		}
	}
	return a
}

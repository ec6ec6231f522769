package kubework

import (
	"fmt"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
)

// checkScheduling refuses the pod fields that choose where a pod runs,
// or whether it runs at all, beyond what the Target allows: tolerations
// (which let pods onto the control plane and onto nodes an administrator
// reserved with a taint), nodeSelector and node affinity (a selector no
// node matches, or gates no controller removes, keep pods Pending while the
// job's quota stays held on the hub), topology spread constraints and
// scheduling groups (the same), and nodeName and schedulerName, which go
// around the spoke's scheduler and so around taints. Each refusal names
// the field and the allowedPodFields entry that would allow it.
func (p PodPolicy) checkScheduling(spec *corev1.PodSpec) []string {
	a := p.Allowed
	var why []string
	for _, t := range spec.Tolerations {
		switch {
		case t.Key == "":
			why = append(why, "tolerations: a toleration without a key tolerates every taint and is not allowed on this target")
		case !slices.Contains(a.TolerationKeys, t.Key):
			why = append(why, fmt.Sprintf("tolerations: taint key %q is not allowed on this target (allowedPodFields.tolerationKeys)", t.Key))
		}
	}
	keys := make([]string, 0, len(spec.NodeSelector))
	for k := range spec.NodeSelector {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !slices.Contains(a.NodeSelectorKeys, k) {
			why = append(why, fmt.Sprintf("nodeSelector: node label key %q is not allowed on this target (allowedPodFields.nodeSelectorKeys)", k))
		}
	}
	why = append(why, p.checkAffinity(spec.Affinity)...)
	why = append(why, p.checkSpread(spec.TopologySpreadConstraints)...)
	if spec.SchedulingGroup != nil {
		why = append(why, "schedulingGroup is not allowed: trainyard gangs a job's pods itself, and a group no controller completes keeps them Pending")
	}
	for _, g := range spec.SchedulingGates {
		if !slices.Contains(a.SchedulingGates, g.Name) {
			why = append(why, fmt.Sprintf("schedulingGates: gate %q is not allowed on this target (allowedPodFields.schedulingGates)", g.Name))
		}
	}
	if spec.NodeName != "" {
		why = append(why, fmt.Sprintf("nodeName %q is not allowed: the spoke's scheduler places pods", spec.NodeName))
	}
	if s := spec.SchedulerName; s != "" && s != corev1.DefaultSchedulerName {
		why = append(why, fmt.Sprintf("schedulerName %q is not allowed: the spoke's %s places pods", s, corev1.DefaultSchedulerName))
	}
	return why
}

// checkAffinity refuses any affinity unless the Target allows it, and then
// node affinity on keys it does not list, or by node name (matchFields).
func (p PodPolicy) checkAffinity(aff *corev1.Affinity) []string {
	if aff == nil || (aff.NodeAffinity == nil && aff.PodAffinity == nil && aff.PodAntiAffinity == nil) {
		return nil
	}
	if !p.Allowed.Affinity {
		return []string{"affinity is not allowed on this target (allowedPodFields.affinity)"}
	}
	na := aff.NodeAffinity
	if na == nil {
		return nil
	}
	var terms []corev1.NodeSelectorTerm
	if r := na.RequiredDuringSchedulingIgnoredDuringExecution; r != nil {
		terms = append(terms, r.NodeSelectorTerms...)
	}
	for _, pt := range na.PreferredDuringSchedulingIgnoredDuringExecution {
		terms = append(terms, pt.Preference)
	}
	var why []string
	seen := map[string]bool{}
	for _, t := range terms {
		for _, e := range t.MatchExpressions {
			if !slices.Contains(p.Allowed.NodeSelectorKeys, e.Key) && !seen[e.Key] {
				seen[e.Key] = true
				why = append(why, fmt.Sprintf("affinity: node label key %q is not allowed on this target (allowedPodFields.nodeSelectorKeys)", e.Key))
			}
		}
		for _, f := range t.MatchFields {
			if !seen["field "+f.Key] {
				seen["field "+f.Key] = true
				why = append(why, fmt.Sprintf("affinity: node affinity by field %q (matchFields) is not allowed: it picks nodes by name", f.Key))
			}
		}
	}
	return why
}

// checkSpread treats topology spread constraints as affinity: a hard one
// (DoNotSchedule) on a key no node carries keeps pods Pending, so they need
// allowedPodFields.affinity, and their topology keys must be listed in
// nodeSelectorKeys.
func (p PodPolicy) checkSpread(spread []corev1.TopologySpreadConstraint) []string {
	if len(spread) == 0 {
		return nil
	}
	if !p.Allowed.Affinity {
		return []string{"topologySpreadConstraints are not allowed on this target (allowedPodFields.affinity)"}
	}
	var why []string
	for _, c := range spread {
		if !slices.Contains(p.Allowed.NodeSelectorKeys, c.TopologyKey) {
			why = append(why, fmt.Sprintf("topologySpreadConstraints: topology key %q is not allowed on this target (allowedPodFields.nodeSelectorKeys)", c.TopologyKey))
		}
	}
	return why
}

package jobset

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// placePodSets matches Kueue's pod sets to the JobSet's replicated jobs by
// name (Kueue makes one pod set per replicated job) and pins each to the
// topology domains placement chose. A mismatch means the hub admitted a
// different job from the one rendered here, so it is refused: running more
// pods than were admitted would break the quota.
func placePodSets(js *jobsetv1alpha2.JobSet, podSets []v1alpha1.PodSetPlacement) error {
	byName := make(map[string]*v1alpha1.PodSetPlacement, len(podSets))
	for i := range podSets {
		byName[podSets[i].Name] = &podSets[i]
	}
	for i := range js.Spec.ReplicatedJobs {
		rj := &js.Spec.ReplicatedJobs[i]
		ps, ok := byName[rj.Name]
		if !ok {
			return fmt.Errorf("replicated job %q has no pod set in the dispatch", rj.Name)
		}
		delete(byName, rj.Name)
		if pods := podCount(rj); pods > ps.Count {
			return fmt.Errorf("replicated job %q renders %d pods but pod set %q was admitted for %d", rj.Name, pods, ps.Name, ps.Count)
		}
		if err := pinToTopology(&rj.Template.Spec.Template.Spec, ps.Topology); err != nil {
			return fmt.Errorf("pod set %q: %w", ps.Name, err)
		}
	}
	for _, ps := range podSets {
		if _, left := byName[ps.Name]; left {
			return fmt.Errorf("pod set %q names no replicated job of the runtime", ps.Name)
		}
	}
	return nil
}

func podCount(rj *jobsetv1alpha2.ReplicatedJob) int32 {
	return rj.Replicas * ptr.Deref(rj.Template.Spec.Parallelism, 1)
}

// pinToTopology adds required node affinity for the assigned domains: a
// node must carry every level's value of one of the domains. An advisory
// assignment adds none: the spoke's scheduler places the pods. The pod counts
// per domain are not enforced: with several domains the scheduler may put
// more pods in one domain than placement planned. Spreading by count needs
// per-domain replicated jobs or Kueue-style scheduling gates; later issue.
func pinToTopology(pod *corev1.PodSpec, t *v1alpha1.TopologyAssignment) error {
	if t == nil || len(t.Domains) == 0 || t.Advisory {
		return nil
	}
	terms := make([]corev1.NodeSelectorTerm, 0, len(t.Domains))
	for _, d := range t.Domains {
		if len(d.Values) != len(t.Levels) {
			return fmt.Errorf("topology domain %v gives %d values for %d levels", d.Values, len(d.Values), len(t.Levels))
		}
		term := corev1.NodeSelectorTerm{}
		for i, level := range t.Levels {
			term.MatchExpressions = append(term.MatchExpressions, corev1.NodeSelectorRequirement{
				Key: level, Operator: corev1.NodeSelectorOpIn, Values: []string{d.Values[i]},
			})
		}
		terms = append(terms, term)
	}
	addRequiredTerms(pod, terms)
	return nil
}

// addRequiredTerms ANDs terms (themselves ORed) with the pod's own required
// node affinity. Terms of one selector are ORed, so the result is every pair
// of an existing term and a new one, each pair's requirements joined.
func addRequiredTerms(pod *corev1.PodSpec, terms []corev1.NodeSelectorTerm) {
	if pod.Affinity == nil {
		pod.Affinity = &corev1.Affinity{}
	}
	if pod.Affinity.NodeAffinity == nil {
		pod.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := pod.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil ||
		len(na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 0 {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: terms}
		return
	}
	have := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	joined := make([]corev1.NodeSelectorTerm, 0, len(have)*len(terms))
	for _, h := range have {
		for _, t := range terms {
			j := *h.DeepCopy()
			j.MatchExpressions = append(j.MatchExpressions, t.MatchExpressions...)
			joined = append(joined, j)
		}
	}
	na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = joined
}

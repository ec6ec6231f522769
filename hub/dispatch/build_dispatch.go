package dispatch

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/placement"
)

// buildDispatch is the Dispatch of one attempt on target t.
func buildDispatch(t *v1alpha1.Target, wl *kueue.Workload, tjSnap *v1alpha1.TrainJobSnapshot,
	rt *v1alpha1.RuntimeSnapshot, req placement.Request, decision placement.Decision, attempt int32) *v1alpha1.Dispatch {
	targetName := t.Name
	d := &v1alpha1.Dispatch{
		ObjectMeta: metav1.ObjectMeta{
			Name:      dispatchName(wl, attempt),
			Namespace: t.Spec.Agent.Namespace,
			Labels: map[string]string{
				v1alpha1.LabelWorkloadUID:       string(wl.UID),
				v1alpha1.LabelWorkloadNamespace: v1alpha1.LabelValue(wl.Namespace),
				v1alpha1.LabelWorkloadName:      v1alpha1.LabelValue(wl.Name),
				v1alpha1.LabelTarget:            v1alpha1.LabelValue(targetName),
				v1alpha1.LabelAttempt:           strconv.Itoa(int(attempt)),
			},
			Annotations: map[string]string{v1alpha1.AnnotationGPUs: strconv.FormatInt(req.GPUs(), 10)},
			// The agent's finalizer is on from the start, so the agent need
			// not patch it on (a hub write per job saved) and no remote
			// work can exist without it. The agent removes it once its work
			// is gone; the hub, when the target is lost (letGo).
			Finalizers: []string{v1alpha1.RemoteCleanupFinalizer},
		},
		Spec: v1alpha1.DispatchSpec{
			Workload:   v1alpha1.WorkloadReference{Namespace: wl.Namespace, Name: wl.Name, UID: wl.UID},
			TargetName: targetName,
			Attempt:    attempt,
			Runtime:    *rt,
			TrainJob:   *tjSnap,
		},
	}
	flavors := map[kueue.PodSetReference]map[string]string{}
	if wl.Status.Admission != nil {
		for _, a := range wl.Status.Admission.PodSetAssignments {
			m := map[string]string{}
			for res, f := range a.Flavors {
				m[string(res)] = string(f)
			}
			flavors[a.Name] = m
		}
	}
	for _, ps := range req.PodSets {
		d.Spec.PodSets = append(d.Spec.PodSets, v1alpha1.PodSetPlacement{
			Name: ps.Name, Count: ps.Count, GPUsPerPod: ps.GPUsPerPod, Flavors: flavors[kueue.PodSetReference(ps.Name)],
		})
	}
	// Only pod sets with a topology request are pinned to their domain;
	// the others may land anywhere on the target, as the remote scheduler
	// sees fit.
	constrained := decision
	constrained.PodSets = nil
	for _, a := range decision.PodSets {
		if a.Level != "" {
			constrained.PodSets = append(constrained.PodSets, a)
		}
	}
	constrained.Apply(d.Spec.PodSets)
	if decision.Queued {
		d.Annotations[v1alpha1.AnnotationQueued] = "true"
	}
	return d
}

// dispatchName is unique across the hub for one Workload attempt: Workloads
// of different namespaces share an agent namespace. It is a DNS label of at
// most 63 characters, so that remote work can carry it as a label value
// (backends.RemoteLabels) and the agent can map that work back to it; the
// Workload name in front is shortened to fit.
func dispatchName(wl *kueue.Workload, attempt int32) string {
	sum := sha256.Sum256([]byte(wl.UID))
	suffix := fmt.Sprintf("-%s-a%d", hex.EncodeToString(sum[:])[:8], attempt)
	prefix := strings.ReplaceAll(wl.Name, ".", "-")
	if max := validation.DNS1123LabelMaxLength - len(suffix); len(prefix) > max {
		prefix = prefix[:max]
	}
	prefix = strings.TrimRight(prefix, "-")
	if prefix == "" {
		prefix = "workload"
	}
	return prefix + suffix
}

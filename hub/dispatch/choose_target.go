package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/dispatch/inflight"
	"github.com/trainyard-dev/trainyard/hub/placement"
)

// placementError wraps a failure of placement itself, as opposed to an API
// error on the way.
type placementError struct{ err error }

func (e placementError) Error() string { return e.err.Error() }

// booking is a decision whose GPUs are booked in flight, not yet written.
type booking struct {
	decision placement.Decision
	target   *v1alpha1.Target
	key      string // the Dispatch's namespace/name
}

// chooseAndBook chooses a target and books the job's GPUs there. It is the
// only step under the in-flight lock (inflight.Record.Decide), and it is
// pure: Targets come from the cache, what is in flight from the watch, and
// no API call is made. A job that finds no room is recorded as waiting
// under the same lock.
func (r *Reconciler) chooseAndBook(ctx context.Context, wl *kueue.Workload, req placement.Request,
	ineligible map[string]string, name string) (booking, error) {
	var b booking
	err := r.flight.Decide(func(tx *inflight.Tx) error {
		var targets v1alpha1.TargetList
		if err := r.client.List(ctx, &targets); err != nil {
			return err
		}
		me := inflight.Place{Key: client.ObjectKeyFromObject(wl), Priority: ptr.Deref(wl.Spec.Priority, 0), Since: wl.CreationTimestamp.Time}
		candidates := make([]placement.Candidate, 0, len(targets.Items))
		for i := range targets.Items {
			t := &targets.Items[i]
			if !t.DeletionTimestamp.IsZero() {
				continue // being drained: nothing new goes there
			}
			candidates = append(candidates, tx.Candidate(t, me, ineligible[t.Name]))
		}
		decision, err := placement.Choose(req, candidates)
		switch {
		case errors.Is(err, placement.ErrNoTarget) || errors.Is(err, placement.ErrNoCapacity):
			judged := map[string]int64{}
			for i := range targets.Items {
				if t := &targets.Items[i]; ineligible[t.Name] != "" {
					judged[t.Name] = t.Generation
				}
			}
			tx.Wait(me, inflight.Need{GPUs: req.GPUs(), Flavors: req.Flavors, QueueFlavors: req.QueueFlavors, Ineligible: judged})
			return placementError{err}
		case errors.Is(err, placement.ErrNeverFits) || errors.Is(err, placement.ErrIneligible):
			return placementError{err}
		case err != nil:
			return err
		}
		for i := range targets.Items {
			if t := &targets.Items[i]; t.Name == decision.Target {
				b = booking{decision: decision, target: t, key: inflight.Key(t.Spec.Agent.Namespace, name)}
				tx.Book(inflight.Booking{Key: b.key, Target: t.Name, Workload: wl.UID, WorkloadKey: me.Key,
					GPUs: req.GPUs(), Nodes: decision.Reservations(), Queued: decision.Queued})
				return nil
			}
		}
		return fmt.Errorf("placement chose target %q, which is not a candidate", decision.Target)
	})
	return b, err
}

// requestOf reads the pod sets, their GPU requests and assigned flavors.
func requestOf(wl *kueue.Workload) placement.Request {
	var req placement.Request
	flavors := map[string]bool{}
	counts := map[kueue.PodSetReference]int32{}
	if wl.Status.Admission != nil {
		for _, a := range wl.Status.Admission.PodSetAssignments {
			for _, f := range a.Flavors {
				flavors[string(f)] = true
			}
			if a.Count != nil {
				counts[a.Name] = *a.Count
			}
		}
	}
	for _, ps := range wl.Spec.PodSets {
		count := ps.Count
		if c, ok := counts[ps.Name]; ok {
			count = c
		}
		required, preferred := placement.PodSetTopology(ps.Template.Annotations)
		if tr := ps.TopologyRequest; tr != nil {
			if tr.Required != nil {
				required = *tr.Required
			}
			if tr.Preferred != nil {
				preferred = *tr.Preferred
			}
		}
		req.PodSets = append(req.PodSets, placement.PodSet{Name: string(ps.Name), Count: count,
			GPUsPerPod: podGPUs(&ps.Template.Spec), Required: required, Preferred: preferred})
	}
	for f := range flavors {
		req.Flavors = append(req.Flavors, f)
	}
	sort.Strings(req.Flavors)
	return req
}

func podGPUs(spec *corev1.PodSpec) int64 {
	var n int64
	for _, c := range spec.Containers {
		if q, ok := c.Resources.Requests[v1alpha1.GPUResource]; ok {
			n += q.Value()
		} else if q, ok := c.Resources.Limits[v1alpha1.GPUResource]; ok {
			n += q.Value()
		}
	}
	return n
}

// queueFlavors lists every flavor of the ClusterQueue that admitted wl. A
// queue that is gone has none: the job is then judged by its own flavors.
func (r *Reconciler) queueFlavors(ctx context.Context, wl *kueue.Workload) ([]string, error) {
	if wl.Status.Admission == nil {
		return nil, nil
	}
	var cq kueue.ClusterQueue
	if err := r.client.Get(ctx, client.ObjectKey{Name: string(wl.Status.Admission.ClusterQueue)}, &cq); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	var out []string
	for _, rg := range cq.Spec.ResourceGroups {
		for _, f := range rg.Flavors {
			out = append(out, string(f.Name))
		}
	}
	return out, nil
}

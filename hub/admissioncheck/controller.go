// Package admissioncheck keeps the Kueue AdmissionChecks that name
// trainyard's controller Active, so ClusterQueues that list them can admit.
package admissioncheck

import (
	"context"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// ControllerName is the spec.controllerName of AdmissionChecks trainyard serves.
const ControllerName = "trainyard.dev/dispatcher"

// Reconciler sets Active=True on trainyard's AdmissionChecks.
type Reconciler struct {
	Client client.Client
}

// Reconcile marks one AdmissionCheck Active, writing only on change.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var ac kueue.AdmissionCheck
	if err := r.Client.Get(ctx, req.NamespacedName, &ac); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if ac.Spec.ControllerName != ControllerName {
		return ctrl.Result{}, nil
	}
	want := metav1.Condition{
		Type:               kueue.AdmissionCheckActive,
		Status:             metav1.ConditionTrue,
		Reason:             v1alpha1.ReasonAdmissionCheckActive,
		Message:            "trainyard dispatches admitted workloads to its targets",
		ObservedGeneration: ac.Generation,
	}
	if old := apimeta.FindStatusCondition(ac.Status.Conditions, want.Type); old != nil &&
		old.Status == want.Status && old.Reason == want.Reason && old.ObservedGeneration == want.ObservedGeneration {
		return ctrl.Result{}, nil
	}
	apimeta.SetStatusCondition(&ac.Status.Conditions, want)
	return ctrl.Result{}, r.Client.Status().Update(ctx, &ac)
}

// SetupWithManager watches only AdmissionChecks of trainyard's controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	ours := predicate.NewPredicateFuncs(func(o client.Object) bool {
		ac, ok := o.(*kueue.AdmissionCheck)
		return ok && ac.Spec.ControllerName == ControllerName
	})
	return ctrl.NewControllerManagedBy(mgr).Named("trainyard-admissioncheck").
		For(&kueue.AdmissionCheck{}, builder.WithPredicates(ours)).Complete(r)
}

// ChecksOf returns the names of the admission checks of wl that trainyard
// serves.
func ChecksOf(ctx context.Context, c client.Client, wl *kueue.Workload) ([]kueue.AdmissionCheckReference, error) {
	var names []kueue.AdmissionCheckReference
	for _, s := range wl.Status.AdmissionChecks {
		var ac kueue.AdmissionCheck
		if err := c.Get(ctx, client.ObjectKey{Name: string(s.Name)}, &ac); err != nil {
			if client.IgnoreNotFound(err) == nil {
				continue
			}
			return nil, err
		}
		if ac.Spec.ControllerName == ControllerName {
			names = append(names, s.Name)
		}
	}
	return names, nil
}

// FlavorlessInOurQueue reports whether Kueue admitted wl with no flavor (its
// pods request nothing the ClusterQueue covers) in a ClusterQueue that lists
// one of trainyard's checks. Kueue applies a check only to the flavors it
// names, all of the queue's by default, so such a Workload is admitted
// without any check; on a hub without a Trainer controller only trainyard
// can run it.
func FlavorlessInOurQueue(ctx context.Context, c client.Client, wl *kueue.Workload) (bool, error) {
	adm := wl.Status.Admission
	if adm == nil || !apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved) {
		return false, nil
	}
	for _, a := range adm.PodSetAssignments {
		if len(a.Flavors) > 0 {
			return false, nil
		}
	}
	var cq kueue.ClusterQueue
	if err := c.Get(ctx, client.ObjectKey{Name: string(adm.ClusterQueue)}, &cq); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if cq.Spec.AdmissionChecksStrategy == nil {
		return false, nil
	}
	for _, rule := range cq.Spec.AdmissionChecksStrategy.AdmissionChecks {
		var ac kueue.AdmissionCheck
		if err := c.Get(ctx, client.ObjectKey{Name: string(rule.Name)}, &ac); err != nil {
			if client.IgnoreNotFound(err) == nil {
				continue
			}
			return false, err
		}
		if ac.Spec.ControllerName == ControllerName {
			return true, nil
		}
	}
	return false, nil
}

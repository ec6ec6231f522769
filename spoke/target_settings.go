package spoke

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/jobset"
	"github.com/trainyard-dev/trainyard/backends/kubework"
	"github.com/trainyard-dev/trainyard/backends/lws"
)

// SettingsUpdater is a Kubernetes backend that applies a changed Target
// without a restart (jobset and lws do): its next render checks pods
// against the new pod policy, and each tenant namespace gets the new Pod
// Security level and egress allowance at its next job.
type SettingsUpdater interface {
	UpdateSettings(kubework.Settings)
}

// targetSettings watches the agent's own Target, and only it (a field
// selector on its name, which RBAC's resourceNames allow), and hands each
// spec change to the backend.
type targetSettings struct {
	hub     client.Reader
	name    string
	backend SettingsUpdater
	applied kubework.Settings
}

// setupTargetSettings adds the watch of Target name to mgr. It runs on
// every replica (no leader election): a standby that takes over renders
// with the current spec too.
func setupTargetSettings(mgr ctrl.Manager, name string, b SettingsUpdater, initial kubework.Settings) error {
	one, err := TargetCache(mgr.GetConfig(), cache.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()}, name)
	if err != nil {
		return err
	}
	if err := mgr.Add(everyReplica{one}); err != nil {
		return err
	}
	r := &targetSettings{hub: one, name: name, backend: b, applied: initial}
	return ctrl.NewControllerManagedBy(mgr).Named("target-settings").
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false)}).
		WatchesRawSource(source.Kind(one, &v1alpha1.Target{}, &handler.TypedEnqueueRequestForObject[*v1alpha1.Target]{},
			predicate.TypedGenerationChangedPredicate[*v1alpha1.Target]{})).
		Complete(r)
}

// TargetCache is a cache of Target name alone, as an agent may read it on
// the hub: its informer lists and watches with a field selector on the
// name, which RBAC allows by resource name (hub/targets.AgentRBAC).
func TargetCache(cfg *rest.Config, opts cache.Options, name string) (cache.Cache, error) {
	opts.ByObject = map[client.Object]cache.ByObject{&v1alpha1.Target{}: {Field: fields.OneTermEqualSelector("metadata.name", name)}}
	c, err := cache.New(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("cache of target %s: %w", name, err)
	}
	return c, nil
}

// Reconcile applies the Target's current settings when they changed.
func (r *targetSettings) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var t v1alpha1.Target
	if err := r.hub.Get(ctx, req.NamespacedName, &t); apierrors.IsNotFound(err) {
		return reconcile.Result{}, nil // a deleted Target drains; its last settings stay
	} else if err != nil {
		return reconcile.Result{}, err
	}
	if t.Spec.Kubernetes == nil {
		return reconcile.Result{}, nil
	}
	s := kubework.SettingsOf(&t.Spec)
	if equality.Semantic.DeepEqual(s, r.applied) {
		return reconcile.Result{}, nil
	}
	r.backend.UpdateSettings(s)
	r.applied = s
	ctrl.LoggerFrom(ctx).Info("applied the target's changed tenancy settings", "target", r.name, "generation", t.Generation,
		"podSecurity", s.Policy.Level, "egressRules", len(s.Egress))
	return reconcile.Result{}, nil
}

var (
	_ SettingsUpdater = (*jobset.Backend)(nil)
	_ SettingsUpdater = (*lws.Backend)(nil)
)

// everyReplica runs a cache on every replica, elected or not: a cache with
// per-object options is a runnable that does not say, which the manager
// starts only once elected.
type everyReplica struct{ cache.Cache }

func (everyReplica) NeedLeaderElection() bool { return false }

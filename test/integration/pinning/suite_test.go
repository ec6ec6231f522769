// Package pinning checks, against a real API server with the hub's
// webhook, policy and controllers running on the hub's own role, that a
// TrainJob's pinned runtime cannot be bypassed: pin annotations are the
// webhook's alone, pinned copies cannot be edited, unmarked or deleted by a
// tenant, a copy changed anyway is not dispatched, and copies no job uses
// are collected.
package pinning

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainyard "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/controllers"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/hub"
	"github.com/trainyard-dev/trainyard/test/util"
)

const (
	flavor = "gpu"
	tenant = "team-a"
	queue  = "lq"
	// gcGrace is the hub's grace period for unreferenced pinned copies.
	gcGrace = 2 * time.Second
)

var env struct {
	fleet *kube.Fleet
	// tenant is a client of a team-a user who may do anything with
	// TrainJobs and TrainingRuntimes in team-a, and nothing more.
	tenant client.Client
}

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("skipping pinning tests in -short mode")
		os.Exit(0)
	}
	os.Exit(util.RunFleetSuite(m, util.FleetSuite{
		Fleet:   kube.FleetOptions{HubOnly: true},
		Timeout: 5 * time.Minute,
		LogFile: "trainyard-pinning-controllers.log",
		Queues:  []trainyard.Queue{{ClusterQueue: "cq", Namespace: tenant, LocalQueue: queue, Flavor: flavor, GPUs: "64"}},
		SetUp: func(ctx context.Context, e *util.FleetEnv) (err error) {
			env.fleet = e.Fleet
			if env.tenant, err = tenantClient(ctx, e.Hub, "tenant-a", tenant); err != nil {
				return fmt.Errorf("tenant user: %w", err)
			}
			return nil
		},
		Options: &trainyard.Options{
			Flavor: flavor, LostTargetTimeout: time.Minute, HeartbeatInterval: time.Second, PinnedRuntimeGracePeriod: gcGrace,
		},
	}))
}

// tenantClient makes user, allowed everything on TrainJobs and
// TrainingRuntimes of namespace, as a tenant administrator would be.
func tenantClient(ctx context.Context, h *kube.Cluster, user, namespace string) (client.Client, error) {
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "trainer-editor", Namespace: namespace},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"trainer.kubeflow.org"},
			Resources: []string{"trainjobs", "trainingruntimes"}, Verbs: []string{"*"}}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "trainer-editor-" + user, Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := h.Client.Create(ctx, obj); client.IgnoreAlreadyExists(err) != nil {
			return nil, err
		}
	}
	cfg, err := h.AddUser(user)
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: hub.Scheme()})
}

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
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

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
	fleet       *kube.Fleet
	controllers *trainyard.Controllers
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
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	ctrl.SetLogger(zap.New(zap.WriteTo(util.LogSink("trainyard-pinning-controllers.log")), zap.UseDevMode(true)))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var err error
	if env.fleet, err = kube.StartFleet(ctx, kube.FleetOptions{HubOnly: true, Dir: os.Getenv("TRAINYARD_ARTIFACTS")}); err != nil {
		fmt.Fprintln(os.Stderr, "start hub:", err)
		return 1
	}
	defer func() {
		if env.controllers != nil {
			env.controllers.Stop()
		}
		util.DumpLogsOnFailure(code, env.fleet.Hub)
		_ = env.fleet.Stop()
	}()
	q := trainyard.Queue{ClusterQueue: "cq", Namespace: tenant, LocalQueue: queue, Flavor: flavor, GPUs: "64"}
	if err := trainyard.SetUpQueue(ctx, env.fleet.Hub, q); err != nil {
		fmt.Fprintln(os.Stderr, "set up queues:", err)
		return 1
	}
	if env.tenant, err = tenantClient(ctx, env.fleet.Hub, "tenant-a", tenant); err != nil {
		fmt.Fprintln(os.Stderr, "tenant user:", err)
		return 1
	}
	env.controllers, err = trainyard.Start(ctx, env.fleet, trainyard.Options{
		Flavor: flavor, LostTargetTimeout: time.Minute, HeartbeatInterval: time.Second, PinnedRuntimeGracePeriod: gcGrace,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start trainyard:", err)
		return 1
	}
	return m.Run()
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

package cli

import (
	"context"
	"path/filepath"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	hubpkg "github.com/trainyard-dev/trainyard/hub"
	"github.com/trainyard-dev/trainyard/hub/tenantview"
	"github.com/trainyard-dev/trainyard/test/util"
)

// relayAnswerTimeout is how long the suite's relay waits for an agent
// (the tests play the agents).
const relayAnswerTimeout = 5 * time.Second

// startRelay runs the hub's LogRequest relay against the suite's API server
// and installs the requester policy from config/hub, as an administrator
// does (the hub chart renders the same). The relay acts as cluster admin
// here; the dispatch suite checks the hub's own role.
func startRelay(ctx context.Context) error {
	root, err := kube.RepoRoot()
	if err != nil {
		return err
	}
	objs, err := util.ReadManifests(filepath.Join(root, "config", "hub", "logrequest_requester_policy.yaml"))
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := hub.Client.Create(ctx, o); err != nil {
			return err
		}
	}
	mgr, err := ctrl.NewManager(hub.Config, ctrl.Options{Scheme: hubpkg.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		return err
	}
	relay := &tenantview.Relay{Client: mgr.GetClient(), Answers: mgr.GetAPIReader(), AnswerTimeout: relayAnswerTimeout}
	if err := relay.SetupWithManager(mgr); err != nil {
		return err
	}
	go func() { _ = mgr.Start(ctx) }()
	return awaitRelay(ctx)
}

// awaitRelay waits until the relay answers a probe, so no test races its
// start.
func awaitRelay(ctx context.Context) error {
	probe := &v1alpha1.LogRequest{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "team-a"},
		Spec: v1alpha1.LogRequestSpec{TrainJobName: "no-such-job", Requester: v1alpha1.Requester{Username: "admin"}}}
	// The admin's name in envtest is not "admin": ask who it is.
	who, err := whoAmI(ctx)
	if err != nil {
		return err
	}
	probe.Spec.Requester = who
	if err := hub.Client.Create(ctx, probe); err != nil {
		return err
	}
	defer func() { _ = hub.Client.Delete(ctx, probe) }()
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := hub.Client.Get(ctx, client.ObjectKeyFromObject(probe), probe)
		return err == nil && probe.Status.Phase.IsFinal(), client.IgnoreNotFound(err)
	})
}

func whoAmI(ctx context.Context) (v1alpha1.Requester, error) {
	ssr := &authnv1.SelfSubjectReview{}
	cs, err := kubernetes.NewForConfig(hub.Config)
	if err != nil {
		return v1alpha1.Requester{}, err
	}
	if ssr, err = cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, ssr, metav1.CreateOptions{}); err != nil {
		return v1alpha1.Requester{}, err
	}
	return v1alpha1.Requester{Username: ssr.Status.UserInfo.Username, Groups: ssr.Status.UserInfo.Groups}, nil
}

package tenancy

import (
	"context"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	jobsetapi "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/hubview"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/hub/targets"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// The identities the sandbox runs the hub and the spoke's agent as
// (cmd/trainyard/sandbox/controllers): users bound to the shipped hub role and
// to hub/targets.AgentRBAC, and nothing else.
func agentUser() string { return "trainyard-agent:" + spoke.Name }

const hubUser = "trainyard-hub"

// as is a hub client acting as user, with only that user's RBAC.
func as(t *testing.T, user string, groups ...string) client.WithWatch {
	t.Helper()
	cfg := rest.CopyConfig(fleet.Hub.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append(groups, "system:authenticated")}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: fleet.Hub.Client.Scheme()})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return c
}

// dispatchOf waits for tj's Dispatch and for the agent's finalizer on it:
// the agent patched it in under the Dispatch writer policy.
func dispatchOf(t *testing.T, tj *trainer.TrainJob) *v1alpha1.Dispatch {
	t.Helper()
	var d v1alpha1.Dispatch
	NewWithT(t).Eventually(func(g Gomega) {
		var ds v1alpha1.DispatchList
		g.Expect(fleet.Hub.Client.List(context.Background(), &ds, client.MatchingLabels{v1alpha1.LabelWorkloadNamespace: tj.Namespace})).To(Succeed())
		var mine []v1alpha1.Dispatch
		for _, x := range ds.Items {
			if x.Spec.TrainJob.Name == tj.Name {
				mine = append(mine, x)
			}
		}
		g.Expect(mine).To(HaveLen(1))
		d = mine[0]
		g.Expect(d.Finalizers).To(ContainElement(v1alpha1.RemoteCleanupFinalizer), "the agent's finalizer")
	}, util.Timeout, util.Interval).Should(Succeed())
	return &d
}

func mergePatch(s string) client.Patch {
	return client.RawPatch("application/merge-patch+json", []byte(s))
}

// TestCompromisedAgentOnTheHub: with the hub credentials of the spoke's
// agent (hub/targets.AgentRBAC and the shipped Dispatch writer policy), a
// compromised agent tries to widen what its Target serves, to relabel,
// annotate or hold a Dispatch, and to write a Dispatch of another Target.
// Each is refused, RBAC for the Target's spec and the policy, by its
// message, for the rest; the agent's own writes (finalizer, status,
// heartbeat) go on, so the job completes.
func TestCompromisedAgentOnTheHub(t *testing.T) {
	ctx, g := context.Background(), NewWithT(t)
	agent := as(t, agentUser())
	torch := shipped(t, "torch-distributed")
	tj := submit(t, tytesting.MakeTrainJob("agent-probe", tenantA).Queue(queue).
		RuntimeRef(trainer.ClusterTrainingRuntimeKind, torch.Name).NumNodes(1).GPUsPerNode(1).Obj())
	d := dispatchOf(t, tj)

	var target v1alpha1.Target
	g.Expect(agent.Get(ctx, client.ObjectKey{Name: spoke.Name}, &target)).To(Succeed(), "the agent reads its Target")
	for what, patch := range map[string]string{
		"add a flavor":          `{"spec":{"flavors":["` + flavor + `","someone-elses"]}}`,
		"take flavor-less jobs": `{"spec":{"flavorlessJobs":"Allow"}}`,
	} {
		err := agent.Patch(ctx, target.DeepCopy(), mergePatch(patch))
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the agent may %s on its Target: %v", what, err)
	}
	err := agent.Update(ctx, target.DeepCopy())
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the agent may update its Target: %v", err)

	// A Dispatch of another Target in the same namespace, of no real job.
	stray := tytesting.MakeDispatch("elsewhere-probe", d.Namespace, "elsewhere").Obj()
	g.Expect(fleet.Hub.Client.Create(ctx, stray)).To(Succeed())
	t.Cleanup(func() { _ = fleet.Hub.Client.Delete(ctx, stray) })

	refusals := map[string]struct {
		err  func() error
		says string
	}{
		"relabel its Dispatch (release its quota's selector)": {func() error {
			return agent.Patch(ctx, d.DeepCopy(), mergePatch(`{"metadata":{"labels":{"`+v1alpha1.LabelWorkloadUID+`":"released"}}}`))
		}, targets.MsgDispatchMetadata},
		"annotate its Dispatch (a logs request of its own)": {func() error {
			return agent.Patch(ctx, d.DeepCopy(), mergePatch(`{"metadata":{"annotations":{"`+v1alpha1.AnnotationLogsRequest+`":"{}"}}}`))
		}, targets.MsgDispatchMetadata},
		"hold its Dispatch with another finalizer": {func() error {
			held := d.DeepCopy()
			patch := client.MergeFrom(held.DeepCopy())
			controllerutil.AddFinalizer(held, "example.com/hold")
			return agent.Patch(ctx, held, patch)
		}, targets.MsgDispatchMetadata},
		"write the status of another Target's Dispatch": {func() error {
			s := stray.DeepCopy()
			s.Status.Phase = v1alpha1.DispatchFailed
			return agent.Status().Update(ctx, s)
		}, targets.MsgDispatchOfOtherTarget},
		"put its finalizer on another Target's Dispatch": {func() error {
			s := stray.DeepCopy()
			patch := client.MergeFrom(s.DeepCopy())
			controllerutil.AddFinalizer(s, v1alpha1.RemoteCleanupFinalizer)
			return agent.Patch(ctx, s, patch)
		}, targets.MsgDispatchOfOtherTarget},
	}
	for what, r := range refusals {
		err := r.err()
		g.Expect(err).To(HaveOccurred(), "the agent may %s", what)
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: %v", what, err)
		g.Expect(err.Error()).To(ContainSubstring(r.says), "%s was refused, but not by the Dispatch writer policy", what)
	}
	var after v1alpha1.Dispatch
	g.Expect(fleet.Hub.Client.Get(ctx, client.ObjectKeyFromObject(d), &after)).To(Succeed())
	g.Expect(after.Labels).To(Equal(d.Labels))
	g.Expect(after.Finalizers).To(Equal([]string{v1alpha1.RemoteCleanupFinalizer}))

	// Its own writes go on: the job completes, the heartbeat moves.
	beat := target.Status.LastHeartbeatTime
	g.Eventually(func(g Gomega) {
		c := condition(g, tj, trainer.TrainJobComplete)
		g.Expect(c).NotTo(BeNil(), "TrainJob %s: conditions %v", tj.Name, tj.Status.Conditions)
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		var now v1alpha1.Target
		g.Expect(fleet.Hub.Client.Get(ctx, client.ObjectKey{Name: spoke.Name}, &now)).To(Succeed())
		g.Expect(now.Status.LastHeartbeatTime).NotTo(BeNil())
		g.Expect(beat == nil || now.Status.LastHeartbeatTime.After(beat.Time)).To(BeTrue(), "no heartbeat since %v", beat)
	}, util.Timeout, util.Interval).Should(Succeed())
}

// TestLogsOnlyThroughTrainJobLog: a viewer of team-a (the shipped view
// role) cannot read or list LogRequests, whose answers hold output, nor may
// alice (the tenant role) list them; alice still gets her job's output
// through `trainyard logs` and reads back the LogRequest she made. The hub
// deletes the agent's answer once relayed, and may delete no ConfigMap
// outside agent namespaces.
func TestLogsOnlyThroughTrainJobLog(t *testing.T) {
	ctx, g := context.Background(), NewWithT(t)
	alice := asTenant(t, "alice", tenantA)
	viewer := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "carol-views", Namespace: tenantA},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: hubview.TenantViewRole},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "carol"}}}
	g.Expect(client.IgnoreAlreadyExists(fleet.Hub.Client.Create(ctx, viewer))).To(Succeed())
	carol := as(t, "carol")

	// A job that runs long enough to be asked for its output.
	rt := tytesting.MakeClusterTrainingRuntime("logs-long").Toleration(kube.KwokToleration).
		PodAnnotation("kwok.trainyard.dev/run-for", "1h").Obj()
	g.Expect(fleet.Hub.Client.Create(ctx, rt)).To(Succeed())
	t.Cleanup(func() { _ = fleet.Hub.Client.Delete(ctx, rt) })
	tj := submit(t, tytesting.MakeTrainJob("logs-probe", tenantA).Queue(queue).
		RuntimeRef(trainer.ClusterTrainingRuntimeKind, rt.Name).NumNodes(1).GPUsPerNode(1).Obj())
	d := dispatchOf(t, tj)
	g.Eventually(func(g Gomega) {
		sets := jobSetsOf(g, tj)
		g.Expect(sets).To(HaveLen(1))
		_, err := spoke.SetPodLogs(ctx, nsA, map[string]string{jobsetapi.JobSetNameKey: sets[0].Name}, "node", "alice step 1", "alice step 2")
		g.Expect(err).NotTo(HaveOccurred())
	}, util.Timeout, util.Interval).Should(Succeed())

	g.Eventually(func(g Gomega) {
		logs, err := hubview.FetchLogs(ctx, alice, tenantA, tj.Name, hubview.LogsOptions{Tail: -1, Timeout: 20 * time.Second})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(logs.Text).To(Equal("alice step 1\nalice step 2\n"))
	}, util.Timeout, util.Interval).Should(Succeed(), "trainyard logs as alice")

	// A LogRequest of hers, answered and kept, for the viewer to try.
	lr := &v1alpha1.LogRequest{ObjectMeta: metav1.ObjectMeta{GenerateName: "kept-", Namespace: tenantA},
		Spec: v1alpha1.LogRequestSpec{TrainJobName: tj.Name, Requester: v1alpha1.Requester{Username: "alice", Groups: []string{tenantA, "system:authenticated"}}}}
	g.Expect(alice.Create(ctx, lr)).To(Succeed())
	t.Cleanup(func() { _ = fleet.Hub.Client.Delete(ctx, lr) })
	g.Eventually(func(g Gomega) {
		g.Expect(alice.Get(ctx, client.ObjectKeyFromObject(lr), lr)).To(Succeed())
		g.Expect(lr.Status.Phase).To(Equal(v1alpha1.LogRequestAnswered), "LogRequest %+v", lr.Status)
	}, util.Timeout, util.Interval).Should(Succeed())
	g.Expect(lr.Status.Log).To(ContainSubstring("alice step 2"))

	// The viewer sees the job (the binding is in effect) but no LogRequest.
	g.Eventually(func() error { return carol.Get(ctx, client.ObjectKeyFromObject(tj), &trainer.TrainJob{}) },
		util.Timeout, util.Interval).Should(Succeed(), "the viewer reads the TrainJob")
	for what, err := range map[string]error{
		"viewer gets alice's LogRequest": carol.Get(ctx, client.ObjectKeyFromObject(lr), &v1alpha1.LogRequest{}),
		"viewer lists LogRequests":       carol.List(ctx, &v1alpha1.LogRequestList{}, client.InNamespace(tenantA)),
		"viewer watches LogRequests": func() error {
			w, err := carol.Watch(ctx, &v1alpha1.LogRequestList{}, client.InNamespace(tenantA))
			if err == nil {
				w.Stop()
			}
			return err
		}(),
		"alice lists LogRequests": alice.List(ctx, &v1alpha1.LogRequestList{}, client.InNamespace(tenantA)),
	} {
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: %v", what, err)
	}

	// The answer left the agent namespace with the relay, under the hub's
	// Role there; elsewhere the hub deletes no ConfigMap.
	g.Eventually(func() bool {
		err := fleet.Hub.Client.Get(ctx, client.ObjectKey{Namespace: d.Namespace, Name: v1alpha1.LogsAnswerName(d.Name)}, &corev1.ConfigMap{})
		return apierrors.IsNotFound(err)
	}, util.Timeout, util.Interval).Should(BeTrue(), "the hub did not delete the agent's answer")
	bystander := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bystander", Namespace: tenantA}}
	g.Expect(client.IgnoreAlreadyExists(fleet.Hub.Client.Create(ctx, bystander))).To(Succeed())
	t.Cleanup(func() { _ = fleet.Hub.Client.Delete(ctx, bystander) })
	err := as(t, hubUser).Delete(ctx, bystander)
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the hub deletes a ConfigMap in a tenant's namespace: %v", err)
}

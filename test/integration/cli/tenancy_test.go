package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/hubview"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/hub/tenantview"
	"github.com/trainyard-dev/trainyard/test/util"
)

// Tenants: alice (group team-a) may use namespace team-a, bob (group
// team-b) namespace team-b, through the RoleBindings in
// config/samples/30-tenants.yaml of the tenant ClusterRole the hub chart
// ships (config/rbac/tenant), which names no Dispatch: tenants never reach
// the agents' namespaces.
type tenant struct{ user, group, ns string }

var (
	alice = tenant{"alice", "team-a", "team-a"}
	bob   = tenant{"bob", "team-b", "team-b"}
)

// grant applies the shipped tenant roles and the sample bindings (once per
// suite) after checking the roles grant nothing on Dispatches.
func grant(t *testing.T, _ tenant) {
	t.Helper()
	root, err := kube.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	for _, f := range []string{"config/rbac/tenant/role.yaml", "config/samples/30-tenants.yaml"} {
		some, err := util.ReadManifests(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, some...)
	}
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" && strings.Contains(fmt.Sprint(o.Object["rules"]), "dispatches") {
			t.Fatalf("the tenant role grants Dispatches: %v", o.Object["rules"])
		}
		if err := hub.Client.Create(context.Background(), o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// as is a client acting as tn (impersonation by the admin).
func as(t *testing.T, tn tenant) client.Client {
	t.Helper()
	grant(t, tn)
	cfg := rest.CopyConfig(hub.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: tn.user, Groups: []string{tn.group}}
	c, err := client.New(cfg, client.Options{Scheme: hubview.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// kubeconfigAs writes the admin kubeconfig impersonating tn, for the CLI.
func kubeconfigAs(t *testing.T, tn tenant) string {
	t.Helper()
	grant(t, tn)
	cfg, err := clientcmd.LoadFromFile(hub.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		ai.Impersonate, ai.ImpersonateGroups = tn.user, []string{tn.group}
	}
	path := filepath.Join(t.TempDir(), tn.user+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func runCLIAs(t *testing.T, tn tenant, args ...string) result {
	t.Helper()
	return runCLI(t, true, append(args, "--kubeconfig", kubeconfigAs(t, tn))...)
}

func TestTenantReadsItsOwnLogs(t *testing.T) {
	seen := answerLogs(t, llamaDispatch, "step 1 loss 2.0\n", "")
	r := runCLIAs(t, alice, "logs", "llama", "-n", "team-a", "--tail", "3")
	if r.code != 0 || r.out != "step 1 loss 2.0\n" {
		t.Fatalf("logs as alice = %d, %q, %q; want the answer", r.code, r.out, r.errOut)
	}
	if req := <-seen; req.TailLines != 3 || !strings.HasPrefix(req.LogRequest, "team-a/llama-logs-") {
		t.Errorf("relayed request = %+v, want 3 lines for a LogRequest of team-a", req)
	}
	var lrs v1alpha1.LogRequestList
	if err := hub.Client.List(context.Background(), &lrs, client.InNamespace("team-a")); err != nil || len(lrs.Items) != 0 {
		t.Errorf("LogRequests left behind: %v, %v", lrs.Items, err)
	}
}

func TestTenantCannotReadAnotherTenantsLogs(t *testing.T) {
	ctx := context.Background()
	c := as(t, bob)
	me := v1alpha1.Requester{Username: bob.user, Groups: []string{bob.group}}

	// In its own namespace, a LogRequest naming alice's job finds no such job.
	lr := &v1alpha1.LogRequest{ObjectMeta: metav1.ObjectMeta{GenerateName: "peek-", Namespace: bob.ns},
		Spec: v1alpha1.LogRequestSpec{TrainJobName: "llama", Requester: me}}
	if err := c.Create(ctx, lr); err != nil {
		t.Fatalf("bob creates a LogRequest in his namespace: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !lr.Status.Phase.IsFinal() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if err := c.Get(ctx, client.ObjectKeyFromObject(lr), lr); err != nil {
			t.Fatal(err)
		}
	}
	if lr.Status.Phase != v1alpha1.LogRequestFailed || lr.Status.Message != `trainjob "llama" not found in namespace "team-b"` || lr.Status.Log != "" {
		t.Errorf("bob's LogRequest for llama: %+v, want Failed: not found in team-b", lr.Status)
	}

	// In alice's namespace RBAC refuses him, through the CLI too.
	lr = &v1alpha1.LogRequest{ObjectMeta: metav1.ObjectMeta{GenerateName: "peek-", Namespace: alice.ns},
		Spec: v1alpha1.LogRequestSpec{TrainJobName: "llama", Requester: me}}
	if err := c.Create(ctx, lr); !apierrors.IsForbidden(err) {
		t.Errorf("bob creates a LogRequest in team-a: %v, want forbidden", err)
	}
	if r := runCLIAs(t, bob, "logs", "llama", "-n", "team-a"); r.code != 1 || !strings.Contains(r.errOut, "forbidden") ||
		!strings.Contains(r.errOut, "you may not read trainjob llama in namespace team-a") || !strings.Contains(r.errOut, "ClusterRole trainyard-tenant") || r.out != "" {
		t.Errorf("logs llama -n team-a as bob = %d, %q, %q; want refused", r.code, r.out, r.errOut)
	}

	// Dispatches, in the agents' namespaces, are not his to read.
	if err := c.List(ctx, &v1alpha1.DispatchList{}); !apierrors.IsForbidden(err) {
		t.Errorf("bob lists Dispatches: %v, want forbidden", err)
	}
	if err := c.Get(ctx, llamaDispatch, &v1alpha1.Dispatch{}); !apierrors.IsForbidden(err) {
		t.Errorf("bob gets llama's Dispatch: %v, want forbidden", err)
	}
}

func TestTenantCannotAskAsSomeoneElse(t *testing.T) {
	c := as(t, bob)
	for name, who := range map[string]v1alpha1.Requester{
		"another user":         {Username: alice.user, Groups: []string{alice.group}},
		"a group he is not in": {Username: bob.user, Groups: []string{bob.group, "system:masters"}},
	} {
		t.Run(name, func(t *testing.T) {
			lr := &v1alpha1.LogRequest{ObjectMeta: metav1.ObjectMeta{GenerateName: "spoof-", Namespace: bob.ns},
				Spec: v1alpha1.LogRequestSpec{TrainJobName: "sim", Requester: who}}
			err := c.Create(context.Background(), lr)
			if err == nil || !strings.Contains(err.Error(), tenantview.MsgRequesterMismatch) {
				t.Errorf("create with requester %+v: %v, want the policy's refusal", who, err)
			}
		})
	}
	// Nor change it afterwards: tenants may not update LogRequests, and
	// the spec is immutable for anyone.
	lr := &v1alpha1.LogRequest{ObjectMeta: metav1.ObjectMeta{GenerateName: "spoof-", Namespace: bob.ns},
		Spec: v1alpha1.LogRequestSpec{TrainJobName: "sim", Requester: v1alpha1.Requester{Username: bob.user}}}
	if err := c.Create(context.Background(), lr); err != nil {
		t.Fatal(err)
	}
	lr.Spec.Requester.Username = alice.user
	if err := c.Update(context.Background(), lr); !apierrors.IsForbidden(err) {
		t.Errorf("bob updates the requester: %v, want forbidden", err)
	}
	spec := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"requester":{"username":"alice"}}}`))
	if err := hub.Client.Patch(context.Background(), lr, spec); err == nil || !strings.Contains(err.Error(), "spec is immutable") {
		t.Errorf("admin updates the requester: %v, want refused as immutable", err)
	}
}

func TestTenantDescribeShowsTheHubsSummary(t *testing.T) {
	ctx := context.Background()
	var d v1alpha1.Dispatch
	if err := hub.Client.Get(ctx, llamaDispatch, &d); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(tenantview.Summarize(&d))
	if err != nil {
		t.Fatal(err)
	}
	var tj trainer.TrainJob
	if err := hub.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "llama"}, &tj); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(tj.DeepCopy())
	metav1.SetMetaDataAnnotation(&tj.ObjectMeta, v1alpha1.AnnotationPlacement, string(raw))
	if err := hub.Client.Patch(ctx, &tj, patch); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		patch := client.MergeFrom(tj.DeepCopy())
		delete(tj.Annotations, v1alpha1.AnnotationPlacement)
		_ = hub.Client.Patch(ctx, &tj, patch)
	})
	r := runCLIAs(t, alice, "describe", "llama", "-n", "team-a")
	if r.code != 0 {
		t.Fatalf("describe as alice = %d, %q", r.code, r.errOut)
	}
	for _, want := range []string{"Placement (hub summary; full Dispatch detail is for administrators):", "Target:", "spoke-1",
		"JobSet trainyard-jobs/ty-llama-2", "Running (RemoteRunning)", "rack-a=2"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("describe as alice lacks %q:\n%s", want, r.out)
		}
	}
	for _, leak := range []string{"trainyard-spoke-1", "Runtime Snapshot", "Attempts:"} {
		if strings.Contains(r.out, leak) {
			t.Errorf("describe as alice shows %q:\n%s", leak, r.out)
		}
	}
	if strings.Contains(r.errOut, "Dispatches") {
		t.Errorf("describe as alice warns about Dispatches: %q", r.errOut)
	}
	// Without rights on the job, a plain refusal.
	if r := runCLIAs(t, bob, "describe", "llama", "-n", "team-a"); r.code != 1 || !strings.Contains(r.errOut, "forbidden") ||
		!strings.Contains(r.errOut, "ClusterRole trainyard-tenant-view") {
		t.Errorf("describe llama -n team-a as bob = %d, %q", r.code, r.errOut)
	}
}

// TestTenantReadsOnlyItsOwnProgressHistory: the history the hub copies
// onto a TrainJob is read with the TrainJob, so alice sees llama's and
// bob, of another team, cannot read it.
func TestTenantReadsOnlyItsOwnProgressHistory(t *testing.T) {
	ctx := context.Background()
	var tj trainer.TrainJob
	key := client.ObjectKey{Namespace: "team-a", Name: "llama"}
	if err := as(t, alice).Get(ctx, key, &tj); err != nil {
		t.Fatalf("alice reads llama: %v", err)
	}
	if h := hubview.ProgressHistoryOf(&tj); h == nil || len(h.Points) != llamaHistoryPoints {
		t.Errorf("alice reads llama's history: %+v, want %d points", h, llamaHistoryPoints)
	}
	if r := runCLIAs(t, alice, "describe", "llama", "-n", "team-a"); !strings.Contains(squash(r.out), fmt.Sprintf("History: %d points", llamaHistoryPoints)) {
		t.Errorf("describe as alice lacks the history:\n%s", r.out)
	}
	if err := as(t, bob).Get(ctx, key, &trainer.TrainJob{}); !apierrors.IsForbidden(err) {
		t.Errorf("bob reads llama: %v, want forbidden", err)
	}
	if err := as(t, bob).List(ctx, &trainer.TrainJobList{}, client.InNamespace("team-a")); !apierrors.IsForbidden(err) {
		t.Errorf("bob lists team-a's TrainJobs: %v, want forbidden", err)
	}
}

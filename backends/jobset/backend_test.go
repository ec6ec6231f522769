package jobset

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/backends/backendtest"
	"github.com/trainyard-dev/trainyard/backends/kubework"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

func testScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(jobsetv1alpha2.AddToScheme(s))
	return s
}

func newFakeClient(objs ...client.Object) client.WithWatch {
	return fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(objs...).Build()
}

func testDispatch(name string) *v1alpha1.Dispatch {
	tj := tytesting.MakeTrainJob("train", "team-a").NumNodes(2).GPUsPerNode(4).Obj()
	return torchDispatch(name, tj, tytesting.TorchRuntimeSpec(1), 2).Obj()
}

func jobSetNames(t *testing.T, c client.Client) []string {
	t.Helper()
	var list jobsetv1alpha2.JobSetList
	if err := c.List(context.Background(), &list); err != nil {
		t.Fatalf("list jobsets: %v", err)
	}
	var names []string
	for _, js := range list.Items {
		names = append(names, js.Namespace+"/"+js.Name)
	}
	return names
}

func TestSubmitCreatesThenAdopts(t *testing.T) {
	ctx, c := context.Background(), newFakeClient()
	d := testDispatch("d1")
	want := &v1alpha1.RemoteRef{Kind: Kind, Namespace: testNS, Name: backends.RemoteName(d)}
	for i := range 3 {
		// A fresh Backend each time: the caller lost every earlier answer.
		got, err := New(c, Options{Namespace: testPrefix}).Submit(ctx, d)
		if err != nil {
			t.Fatalf("Submit #%d: %v", i+1, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Submit #%d ref (-want +got):\n%s", i+1, diff)
		}
	}
	if diff := cmp.Diff([]string{testNS + "/" + want.Name}, jobSetNames(t, c)); diff != "" {
		t.Errorf("jobsets (-want +got):\n%s", diff)
	}
}

// TestSubmitAdoptsAfterAlreadyExists: the cache has not seen the JobSet an
// earlier Submit created, so Create meets AlreadyExists; Submit then adopts.
func TestSubmitAdoptsAfterAlreadyExists(t *testing.T) {
	ctx := context.Background()
	d := testDispatch("d1")
	existing, err := Render(d, RenderOptions{Namespace: testNS})
	if err != nil {
		t.Fatal(err)
	}
	staleGets := 2 // the first Get, and the first re-read after AlreadyExists
	c := interceptor.NewClient(newFakeClient(existing), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*jobsetv1alpha2.JobSet); ok && staleGets > 0 {
				staleGets--
				return apierrors.NewNotFound(schema.GroupResource{Group: "jobset.x-k8s.io", Resource: "jobsets"}, key.Name)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	ref, err := New(c, Options{Namespace: testPrefix}).Submit(ctx, d)
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	if ref.Name != existing.Name || len(jobSetNames(t, c)) != 1 {
		t.Errorf("Submit = %+v with jobsets %v; want the one existing %s", ref, jobSetNames(t, c), existing.Name)
	}
}

func TestSubmitRefusesOthersJobSet(t *testing.T) {
	ctx := context.Background()
	d := testDispatch("d1")
	other, err := Render(d, RenderOptions{Namespace: testNS})
	if err != nil {
		t.Fatal(err)
	}
	other.Labels[backends.LabelWorkloadUID] = "someone-else"
	c := newFakeClient(other)
	b := New(c, Options{Namespace: testPrefix})
	if _, err := b.Submit(ctx, d); !errors.Is(err, ErrNotOwned) {
		t.Errorf("Submit = %v, want ErrNotOwned", err)
	}
	if _, err := b.Cancel(ctx, d); !errors.Is(err, ErrNotOwned) {
		t.Errorf("Cancel = %v, want ErrNotOwned", err)
	}
	var after jobsetv1alpha2.JobSet
	if err := c.Get(ctx, client.ObjectKeyFromObject(other), &after); err != nil || after.Labels[backends.LabelWorkloadUID] != "someone-else" {
		t.Errorf("the other JobSet was touched: %v, labels %v", err, after.Labels)
	}
}

func TestSubmitRejectsBadInputWithoutCreating(t *testing.T) {
	c := newFakeClient()
	d := testDispatch("d1")
	d.Spec.PodSets[0].Count = 1
	if _, err := New(c, Options{Namespace: testPrefix}).Submit(context.Background(), d); !errors.Is(err, backends.ErrRejected) {
		t.Errorf("Submit = %v, want ErrRejected", err)
	}
	if names := jobSetNames(t, c); len(names) != 0 {
		t.Errorf("jobsets %v created for rejected input", names)
	}
}

// TestSubmitMakesTheTenantNamespace: Submit makes the tenant's namespace,
// labelled and with its NetworkPolicies, before the JobSet, whose
// companions are owned by it (its UID, as the API server sets it). A
// namespace deleted later is never made again bare: that Submit fails and
// the next one makes it as the first did.
func TestSubmitMakesTheTenantNamespace(t *testing.T) {
	ctx := context.Background()
	base := newFakeClient()
	c := interceptor.NewClient(base, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*corev1.Namespace); !ok {
				var ns corev1.Namespace
				if err := c.Get(ctx, client.ObjectKey{Name: obj.GetNamespace()}, &ns); apierrors.IsNotFound(err) {
					// As the API server does, and the fake client does not.
					return apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, obj.GetNamespace())
				}
			}
			obj.SetUID(types.UID("uid-of-" + obj.GetName()))
			return c.Create(ctx, obj, opts...)
		},
	})
	checkNamespace := func(t *testing.T) {
		t.Helper()
		var ns corev1.Namespace
		if err := base.Get(ctx, client.ObjectKey{Name: testNS}, &ns); err != nil {
			t.Fatalf("namespace: %v", err)
		}
		if ns.Labels["pod-security.kubernetes.io/enforce"] != "baseline" || ns.Labels[v1alpha1.LabelTenant] != "team-a" {
			t.Errorf("namespace labels = %v, want baseline enforced for tenant team-a", ns.Labels)
		}
		var nps networkingv1.NetworkPolicyList
		if err := base.List(ctx, &nps, client.InNamespace(testNS)); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, np := range nps.Items {
			names = append(names, np.Name)
		}
		if !slices.Contains(names, kubework.PolicyDefaultDeny) || !slices.Contains(names, kubework.PolicyAllowDNS) {
			t.Errorf("NetworkPolicies %v, want the default deny and the DNS exception", names)
		}
	}
	d := fluxDispatch(t)
	b := New(c, Options{Namespace: testPrefix})
	if _, err := b.Submit(ctx, d); err != nil {
		t.Fatalf("Submit: %v", err)
	}
	checkNamespace(t)
	var curve corev1.Secret
	if err := base.Get(ctx, client.ObjectKey{Namespace: testNS, Name: backends.RemoteName(d) + "-flux-curve"}, &curve); err != nil {
		t.Fatalf("curve Secret: %v", err)
	}
	if owners := curve.OwnerReferences; len(owners) != 1 || owners[0].UID != types.UID("uid-of-"+backends.RemoteName(d)) {
		t.Errorf("curve Secret owners = %v, want the created JobSet with its UID", owners)
	}
	if names := jobSetNames(t, base); len(names) != 1 {
		t.Errorf("jobsets = %v, want one", names)
	}

	// The namespace goes, with all in it; a new job of the tenant comes.
	if err := base.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}); err != nil {
		t.Fatal(err)
	}
	if err := base.DeleteAllOf(ctx, &networkingv1.NetworkPolicy{}, client.InNamespace(testNS)); err != nil {
		t.Fatal(err)
	}
	d2 := testDispatch("d2")
	if _, err := b.Submit(ctx, d2); !errors.Is(err, kubework.ErrNamespaceGone) {
		t.Fatalf("Submit into a deleted namespace = %v, want ErrNamespaceGone", err)
	}
	if _, err := b.Submit(ctx, d2); err != nil {
		t.Fatalf("Submit again: %v", err)
	}
	checkNamespace(t)
}

func TestCancelReportsGoneOnlyWhenPodsAreGone(t *testing.T) {
	ctx, c := context.Background(), newFakeClient()
	d := testDispatch("d1")
	b := New(c, Options{Namespace: testPrefix})
	ref, err := b.Submit(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	leftover := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: ref.Name + "-node-0-0", Namespace: testNS,
		Labels: map[string]string{jobsetv1alpha2.JobSetNameKey: ref.Name}}}
	if err := c.Create(ctx, leftover); err != nil {
		t.Fatal(err)
	}
	backendtest.CheckCancel(t, b, d, []backendtest.CancelStep{
		{Gone: false}, // deletes the JobSet
		{Gone: false}, // JobSet gone, a pod is left
		{Do: func() { _ = c.Delete(ctx, leftover) }, Gone: true}, // nothing left
		{Gone: true}, // and it stays so
	})
	if _, err := b.Observe(ctx, d); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("Observe after Cancel = %v, want ErrNotFound", err)
	}
}

func TestListRemoteAndDelete(t *testing.T) {
	ctx := context.Background()
	mine, err := Render(testDispatch("d1"), RenderOptions{Namespace: testNS})
	if err != nil {
		t.Fatal(err)
	}
	oldAttempt, err := Render(tytesting.MakeDispatch("d2", "trainyard-spoke1", "spoke1").Attempt(3).
		SnapshotTrainJob(tytesting.MakeTrainJob("other", "team-a").NumNodes(1).Obj()).
		SnapshotRuntime(ctr, "torch-distributed", tytesting.TorchRuntimeSpec(1)).Obj(), RenderOptions{Namespace: testNS})
	if err != nil {
		t.Fatal(err)
	}
	unmanaged := &jobsetv1alpha2.JobSet{ObjectMeta: metav1.ObjectMeta{Name: "by-hand", Namespace: testNS}}
	elsewhere := mine.DeepCopy()
	elsewhere.Namespace = "other-ns"
	c := newFakeClient(mine, oldAttempt, unmanaged, elsewhere)
	b := New(c, Options{Namespace: testPrefix})

	got, err := b.ListRemote(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []backends.RemoteWork{
		{Ref: v1alpha1.RemoteRef{Kind: Kind, Namespace: testNS, Name: oldAttempt.Name}, DispatchNamespace: "trainyard-spoke1", DispatchName: "d2", Attempt: 3},
		{Ref: v1alpha1.RemoteRef{Kind: Kind, Namespace: testNS, Name: mine.Name}, DispatchNamespace: "trainyard-spoke1", DispatchName: "d1", Attempt: 1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ListRemote (-want +got):\n%s", diff)
	}
	if err := b.Delete(ctx, got[0]); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := b.Delete(ctx, got[0]); err != nil {
		t.Errorf("Delete of deleted work: %v", err)
	}
	wantLeft := []string{"other-ns/" + mine.Name, testNS + "/by-hand", testNS + "/" + mine.Name}
	if diff := cmp.Diff(wantLeft, jobSetNames(t, c)); diff != "" {
		t.Errorf("jobsets left (-want +got):\n%s", diff)
	}
}

// TestListRemoteFinished: a JobSet is finished work, which a lease fence
// keeps, once its Completed or Failed condition is True; and not before,
// even while it is being deleted or suspended.
func TestListRemoteFinished(t *testing.T) {
	cond := func(typ jobsetv1alpha2.JobSetConditionType, status metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: string(typ), Status: status, Reason: "Test", LastTransitionTime: metav1.Now()}
	}
	cases := map[string]struct {
		conditions []metav1.Condition
		deleting   bool
		want       bool
	}{
		"new":                     {},
		"completed":               {conditions: []metav1.Condition{cond(jobsetv1alpha2.JobSetCompleted, metav1.ConditionTrue)}, want: true},
		"failed":                  {conditions: []metav1.Condition{cond(jobsetv1alpha2.JobSetFailed, metav1.ConditionTrue)}, want: true},
		"failed, being deleted":   {conditions: []metav1.Condition{cond(jobsetv1alpha2.JobSetFailed, metav1.ConditionTrue)}, deleting: true, want: true},
		"completed False":         {conditions: []metav1.Condition{cond(jobsetv1alpha2.JobSetCompleted, metav1.ConditionFalse)}},
		"suspended":               {conditions: []metav1.Condition{cond(jobsetv1alpha2.JobSetSuspended, metav1.ConditionTrue)}},
		"running, being deleted":  {deleting: true},
		"startup policy complete": {conditions: []metav1.Condition{cond(jobsetv1alpha2.JobSetStartupPolicyCompleted, metav1.ConditionTrue)}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			js, err := Render(testDispatch("d1"), RenderOptions{Namespace: testNS})
			if err != nil {
				t.Fatal(err)
			}
			js.Status.Conditions = tc.conditions
			if tc.deleting {
				js.DeletionTimestamp, js.Finalizers = &metav1.Time{Time: metav1.Now().Time}, []string{"foregroundDeletion"}
			}
			got, err := New(newFakeClient(js), Options{Namespace: testPrefix}).ListRemote(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0].Finished != tc.want {
				t.Errorf("ListRemote = %+v, want one piece of work with Finished %v", got, tc.want)
			}
		})
	}
}

// TestObserveConfirmsNotFoundWithLiveRead: right after Submit the agent's
// cache may not hold the new JobSet; Observe must not call it missing (the
// agent would fail the Dispatch while the JobSet runs), so it asks the API
// server before answering ErrNotFound.
func TestObserveConfirmsNotFoundWithLiveRead(t *testing.T) {
	ctx := context.Background()
	d := testDispatch("d1")
	live := newFakeClient()
	if _, err := New(live, Options{Namespace: testPrefix}).Submit(ctx, d); err != nil {
		t.Fatal(err)
	}
	staleCache := newFakeClient()

	st, err := New(staleCache, Options{Namespace: testPrefix, LiveReader: live}).Observe(ctx, d)
	if err != nil {
		t.Fatalf("Observe with a live reader: %v", err)
	}
	if st.Phase != v1alpha1.DispatchSubmitted {
		t.Errorf("phase %q, want Submitted", st.Phase)
	}
	if _, err := New(staleCache, Options{Namespace: testPrefix}).Observe(ctx, d); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("without a live reader the stale cache answers %v, want ErrNotFound", err)
	}
	if _, err := New(newFakeClient(), Options{Namespace: testPrefix, LiveReader: newFakeClient()}).Observe(ctx, d); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("JobSet missing everywhere: got %v, want ErrNotFound", err)
	}
}

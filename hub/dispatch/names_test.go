package dispatch

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueuetesting "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/placement"
)

// The longest names users bring: a 63-character TrainJob (Kueue names its
// Workload "trainjob-<name>-<5 hex>", 78 characters) in a 63-character
// namespace, on a Target with a 253-character name.
var (
	name63     = "t" + strings.Repeat("r", 61) + "n"
	ns63       = "n" + strings.Repeat("s", 62)
	workload78 = "trainjob-" + name63 + "-1a2b3"
	target253  = strings.Repeat("target.", 36) + "x"
)

func TestDispatchLabelsAtTheLimits(t *testing.T) {
	cases := map[string]struct {
		wlName, wlNS, target string
		attempt              int32
	}{
		"short names":                    {wlName: "trainjob-bert-1a2b3", wlNS: "team-a", target: "spoke-a", attempt: 1},
		"Workload of a 63-character job": {wlName: workload78, wlNS: ns63, target: "spoke-a", attempt: 1},
		"253-character Workload name":    {wlName: strings.Repeat("w", 253), wlNS: ns63, target: target253, attempt: 1 << 30},
		"dotted Workload name":           {wlName: strings.Repeat("ab.", 30) + "c", wlNS: "team-a", target: "spoke.example.com", attempt: 12},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			wl := kueuetesting.MakeWorkload(tc.wlName, tc.wlNS).UID("5c0e2a7e-8f1b-4d2c-9a3e-1b2c3d4e5f60").Obj()
			target := &v1alpha1.Target{
				ObjectMeta: metav1.ObjectMeta{Name: tc.target},
				Spec:       v1alpha1.TargetSpec{Agent: v1alpha1.AgentIdentity{Namespace: "agents"}},
			}
			tj := tjOf(name63)
			tjSnap := &v1alpha1.TrainJobSnapshot{Name: tj.Name, UID: tj.UID}
			d := buildDispatch(target, wl, tjSnap, &v1alpha1.RuntimeSnapshot{},
				placement.Request{}, placement.Decision{Target: tc.target}, tc.attempt)
			if errs := validation.IsDNS1123Label(d.Name); len(errs) > 0 {
				t.Errorf("Dispatch name %q: %v", d.Name, errs)
			}
			for k, v := range d.Labels {
				if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
					t.Errorf("label %s=%q: %v", k, v, errs)
				}
			}
			want := v1alpha1.WorkloadReference{Namespace: tc.wlNS, Name: tc.wlName, UID: wl.UID}
			if diff := cmp.Diff(want, d.Spec.Workload); diff != "" {
				t.Errorf("spec.workload (-want +got):\n%s", diff)
			}
			if got := workloadOfDispatch(d); len(got) != 1 ||
				got[0].NamespacedName != (types.NamespacedName{Namespace: tc.wlNS, Name: tc.wlName}) {
				t.Errorf("workloadOfDispatch = %v, want %s/%s", got, tc.wlNS, tc.wlName)
			}
		})
	}
}

// TestWorkloadsOnTargetComparesFullNames: two Targets whose long names
// share a label value each wake only the Workloads of their own Dispatches.
func TestWorkloadsOnTargetComparesFullNames(t *testing.T) {
	a, b := target253, target253[:252]+"y"
	mk := func(name, target, wl string) *v1alpha1.Dispatch {
		d := &v1alpha1.Dispatch{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "agents",
			Labels: map[string]string{v1alpha1.LabelTarget: v1alpha1.LabelValue(target)}}}
		d.Spec.TargetName, d.Spec.Workload = target, v1alpha1.WorkloadReference{Namespace: "team-a", Name: wl}
		return d
	}
	// Force a shared label value, as a hash collision would.
	da, db := mk("da", a, "wl-a"), mk("db", b, "wl-b")
	db.Labels[v1alpha1.LabelTarget] = da.Labels[v1alpha1.LabelTarget]
	r := &Reconciler{client: withDispatchIndexes(fake.NewClientBuilder().WithScheme(testScheme(t))).WithObjects(da, db).Build()}
	got := r.workloadsOnTarget(context.Background(), a)
	want := []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "wl-a"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("workloadsOnTarget (-want +got):\n%s", diff)
	}
}

func TestReleaseAttempt(t *testing.T) {
	gr := schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "dispatches"}
	cases := map[string]struct {
		createErr error
		want      string // the attempt annotation afterwards
	}{
		"invalid Dispatch":      {createErr: apierrors.NewInvalid(v1alpha1.GroupVersion.WithKind("Dispatch").GroupKind(), "d", field.ErrorList{field.TooLong(field.NewPath("metadata", "labels"), "", 63)}), want: "4"},
		"namespace missing":     {createErr: apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "agents"), want: "4"},
		"webhook denial":        {createErr: apierrors.NewForbidden(gr, "d", errors.New("denied")), want: "4"},
		"rate limited":          {createErr: apierrors.NewTooManyRequests("slow down", 1), want: "4"},
		"timeout: maybe stored": {createErr: apierrors.NewTimeoutError("timed out", 1), want: "5"},
		"connection lost":       {createErr: errors.New("connection reset by peer"), want: "5"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			wl := reserved().Annotation(v1alpha1.AnnotationAttempt, "4").Obj()
			c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(wl).Build()
			r := &Reconciler{client: c}
			s := &state{wl: wl.DeepCopy()}
			attempt := nextAttemptNumber(s)
			if err := r.nextAttempt(context.Background(), s, attempt); err != nil || attempt != 5 {
				t.Fatalf("nextAttempt = %d, %v; want 5", attempt, err)
			}
			if err := r.releaseAttempt(context.Background(), s.wl, attempt, tc.createErr); err != tc.createErr {
				t.Errorf("releaseAttempt returned %v, want the create error", err)
			}
			var got kueue.Workload
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(wl), &got); err != nil {
				t.Fatal(err)
			}
			if a := got.Annotations[v1alpha1.AnnotationAttempt]; a != tc.want {
				t.Errorf("attempt annotation %q, want %q", a, tc.want)
			}
			if next := nextAttemptNumber(&state{wl: &got}); tc.want == "4" && next != 5 {
				t.Errorf("the next pass takes attempt %d, want 5 again", next)
			}
		})
	}
}

// TestReleaseAttemptLosesToAnotherWriter: a Workload changed since the
// attempt was taken keeps its number (another replica may use it).
func TestReleaseAttemptLosesToAnotherWriter(t *testing.T) {
	wl := reserved().Annotation(v1alpha1.AnnotationAttempt, "5").Obj()
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(wl).
		WithInterceptorFuncs(interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			return apierrors.NewConflict(schema.GroupResource{Resource: "workloads"}, o.GetName(), errors.New("changed"))
		}}).Build()
	r := &Reconciler{client: c}
	createErr := apierrors.NewBadRequest("no")
	if err := r.releaseAttempt(context.Background(), wl.DeepCopy(), 5, createErr); err != createErr {
		t.Errorf("releaseAttempt returned %v, want the create error", err)
	}
	var got kueue.Workload
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(wl), &got); err != nil || got.Annotations[v1alpha1.AnnotationAttempt] != "5" {
		t.Errorf("attempt annotation %q (%v), want 5 kept", got.Annotations[v1alpha1.AnnotationAttempt], err)
	}
}

func TestIgnoreOwnAttemptWrites(t *testing.T) {
	base := func() *kueue.Workload { return reserved().Annotation(v1alpha1.AnnotationAttempt, "1").Obj() }
	cases := map[string]struct {
		change func(wl *kueue.Workload)
		wake   bool
	}{
		"only the attempt":               {change: func(wl *kueue.Workload) { wl.Annotations[v1alpha1.AnnotationAttempt] = "2"; wl.ResourceVersion = "9" }},
		"attempt and another annotation": {change: func(wl *kueue.Workload) { wl.Annotations[v1alpha1.AnnotationAttempt] = "2"; wl.Annotations["x"] = "y" }, wake: true},
		"attempt and a status change":    {change: func(wl *kueue.Workload) { wl.Annotations[v1alpha1.AnnotationAttempt] = "2"; wl.Status.Conditions = nil }, wake: true},
		"attempt and a finalizer": {change: func(wl *kueue.Workload) {
			wl.Annotations[v1alpha1.AnnotationAttempt] = "2"
			wl.Finalizers = []string{"f"}
		}, wake: true},
		"attempt and deletion": {change: func(wl *kueue.Workload) {
			wl.Annotations[v1alpha1.AnnotationAttempt] = "2"
			wl.DeletionTimestamp = &metav1.Time{}
		}, wake: true},
		"a status change alone":           {change: func(wl *kueue.Workload) { wl.Status.Conditions = nil }, wake: true},
		"nothing (a resync)":              {change: func(wl *kueue.Workload) {}, wake: true},
		"attempt and a spec (generation)": {change: func(wl *kueue.Workload) { wl.Annotations[v1alpha1.AnnotationAttempt] = "2"; wl.Generation++ }, wake: true},
	}
	p := ignoreOwnAttemptWrites()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			old, cur := base(), base()
			tc.change(cur)
			if got := p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: cur}); got != tc.wake {
				t.Errorf("wakes the controller: %v, want %v", got, tc.wake)
			}
		})
	}
}

// TestIgnoreTheStartOfAWait: the write that starts a wait for room wakes
// no pass; any other change beside it, or a later change of a waiting
// Workload, does.
func TestIgnoreTheStartOfAWait(t *testing.T) {
	check := func(st kueue.CheckState, msg string) kueue.AdmissionCheckState {
		return kueue.AdmissionCheckState{Name: "trainyard", State: st, Message: msg, LastTransitionTime: metav1.NewTime(t0)}
	}
	waiting := check(kueue.CheckStatePending, WaitingPrefix+"no target has room")
	cases := map[string]struct {
		before, after kueue.AdmissionCheckState
		change        func(wl *kueue.Workload)
		wake          bool
	}{
		"starts to wait":                         {before: check(kueue.CheckStatePending, ""), after: waiting},
		"starts to wait after a Retry":           {before: check(kueue.CheckStateRetry, "x"), after: waiting},
		"was waiting, now dispatched":            {before: waiting, after: check(kueue.CheckStatePending, "dispatched to target a"), wake: true},
		"was waiting, Kueue changed a condition": {before: waiting, after: waiting, change: func(wl *kueue.Workload) { wl.Status.Conditions = nil }, wake: true},
		"starts to wait and is evicted": {before: check(kueue.CheckStatePending, ""), after: waiting, change: func(wl *kueue.Workload) {
			wl.Status.Conditions = nil
		}, wake: true},
		"starts to wait and is deleted": {before: check(kueue.CheckStatePending, ""), after: waiting, change: func(wl *kueue.Workload) {
			wl.DeletionTimestamp = &metav1.Time{}
		}, wake: true},
	}
	p := ignoreOwnAttemptWrites()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			old, cur := reserved().Obj(), reserved().Obj()
			old.Status.AdmissionChecks = []kueue.AdmissionCheckState{tc.before}
			cur.Status.AdmissionChecks = []kueue.AdmissionCheckState{tc.after}
			if tc.change != nil {
				tc.change(cur)
			}
			if got := p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: cur}); got != tc.wake {
				t.Errorf("wakes the controller: %v, want %v", got, tc.wake)
			}
		})
	}
}

func tjOf(name string) *trainer.TrainJob {
	return &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a", UID: "tj-uid"}}
}

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{v1alpha1.AddToScheme, kueue.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// TestDispatchIsBornWithTheAgentsFinalizer: the hub creates each Dispatch
// with the agent's finalizer on, so the agent writes no patch for it and no
// remote work ever exists without it.
func TestDispatchIsBornWithTheAgentsFinalizer(t *testing.T) {
	wl := kueuetesting.MakeWorkload("wl", "team-a").UID("uid").Obj()
	target := &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Name: "spoke-a"},
		Spec: v1alpha1.TargetSpec{Agent: v1alpha1.AgentIdentity{Namespace: "agents"}}}
	d := buildDispatch(target, wl, &v1alpha1.TrainJobSnapshot{}, &v1alpha1.RuntimeSnapshot{},
		placement.Request{}, placement.Decision{Target: target.Name}, 1)
	if diff := cmp.Diff([]string{v1alpha1.RemoteCleanupFinalizer}, d.Finalizers); diff != "" {
		t.Errorf("finalizers (-want +got):\n%s", diff)
	}
}

package dispatch

import (
	"context"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

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

package lws

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	lwsv1 "sigs.k8s.io/lws/api/leaderworkerset/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/backends/backendtest"
	"github.com/trainyard-dev/trainyard/backends/jobset"
	"github.com/trainyard-dev/trainyard/backends/kubework"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

func newFakeClient(objs ...client.Object) client.WithWatch {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(lwsv1.AddToScheme(s))
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
}

// lwsPod is a pod of the LeaderWorkerSet set, as LWS labels its leader and workers.
func lwsPod(ns, set, name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
		Labels: map[string]string{lwsv1.SetNameLabelKey: set}}}
}

// TestCancelReportsGoneOnlyWhenPodsAreGone: Cancel deletes the
// LeaderWorkerSet and reports gone only once no pod labelled with its
// name is left, leader or worker; another set's pods do not hold it.
func TestCancelReportsGoneOnlyWhenPodsAreGone(t *testing.T) {
	ctx, c := context.Background(), newFakeClient()
	d := torchDispatch(2, tytesting.TorchRuntimeSpec(1)).Obj()
	b := New(c, Options{Namespace: testNS})
	ref, err := b.Submit(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	leader, worker := lwsPod(ref.Namespace, ref.Name, ref.Name+"-0"), lwsPod(ref.Namespace, ref.Name, ref.Name+"-0-1")
	for _, p := range []client.Object{leader, worker, lwsPod(ref.Namespace, "another-set", "another-set-0")} {
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	backendtest.CheckCancel(t, b, d, []backendtest.CancelStep{
		{Gone: false}, // deletes the LeaderWorkerSet
		{Gone: false}, // it is gone, its pods are left
		{Do: func() { _ = c.Delete(ctx, leader) }, Gone: false}, // a worker is left
		{Do: func() { _ = c.Delete(ctx, worker) }, Gone: true},  // nothing of it is left
		{Gone: true}, // and it stays so
	})
	if _, err := b.Observe(ctx, d); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("Observe after Cancel = %v, want ErrNotFound", err)
	}
}

// TestListRemoteFinished: a LeaderWorkerSet is finished work, which a lease
// fence keeps, once Observe recorded its end and scaled it to zero; a set
// scaled to zero without the record, or scaled up again after it, is not.
func TestListRemoteFinished(t *testing.T) {
	record := map[string]string{v1alpha1.AnnotationLeaderWorkerSetFinished: `{"phase":"Succeeded","reason":"LeaderSucceeded","at":null}`}
	cases := map[string]struct {
		annotations map[string]string
		replicas    int32
		want        bool
	}{
		"running":                      {replicas: 1},
		"ended, scaled to zero":        {annotations: record, replicas: 0, want: true},
		"scaled to zero by someone":    {replicas: 0},
		"ended, scaled up again since": {annotations: record, replicas: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := torchDispatch(2, tytesting.TorchRuntimeSpec(1)).Obj()
			r, err := Render(d, jobset.RenderOptions{Namespace: kubework.NamespaceOf(testNS, d)})
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.annotations {
				r.LWS.Annotations[k] = v
			}
			r.LWS.Spec.Replicas = ptr.To(tc.replicas)
			got, err := New(newFakeClient(r.LWS), Options{Namespace: testNS}).ListRemote(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0].Finished != tc.want {
				t.Errorf("ListRemote = %+v, want one piece of work with Finished %v", got, tc.want)
			}
		})
	}
}

// TestStopWithinFollowsSettings: the stop bound is the grace cap in force
// (from Options, then from UpdateSettings) and the margin.
func TestStopWithinFollowsSettings(t *testing.T) {
	most := int64(120)
	b := New(newFakeClient(), Options{Namespace: testNS, Policy: kubework.PodPolicy{Allowed: v1alpha1.AllowedPodFields{MaxTerminationGracePeriodSeconds: &most}}})
	if got, want := b.StopWithin(), 120*time.Second+backends.StopMargin; got != want {
		t.Errorf("StopWithin from Options = %v, want %v", got, want)
	}
	b.UpdateSettings(kubework.Settings{})
	if got, want := b.StopWithin(), 30*time.Second+backends.StopMargin; got != want {
		t.Errorf("StopWithin back at the default = %v, want %v", got, want)
	}
}

package api

import (
	"context"
	"testing"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const dispatchNS = "trainyard-spoke1"

func TestDispatchValidation(t *testing.T) {
	ctx := context.Background()
	if err := k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: dispatchNS}}); err != nil {
		t.Fatal(err)
	}
	topo := func(levels []string, values ...[]string) *v1alpha1.TopologyAssignment {
		a := &v1alpha1.TopologyAssignment{Levels: levels}
		for _, v := range values {
			a.Domains = append(a.Domains, v1alpha1.TopologyDomainAssignment{Values: v, Count: 1})
		}
		return a
	}
	cases := map[string]struct {
		dispatch *v1alpha1.Dispatch
		wantErr  string
	}{
		"valid": {
			dispatch: tytesting.MakeDispatch("ok", dispatchNS, "spoke1").Obj(),
		},
		"valid with topology": {
			dispatch: tytesting.MakeDispatch("ok-topo", dispatchNS, "spoke1").PodSets(v1alpha1.PodSetPlacement{
				Name: "node", Count: 2, Flavors: map[string]string{"nvidia.com/gpu": "gpu-a"},
				Topology: topo([]string{"rack", "kubernetes.io/hostname"}, []string{"r1", "n1"}, []string{"r1", "n2"}),
			}).Obj(),
		},
		"attempt zero": {
			dispatch: tytesting.MakeDispatch("attempt0", dispatchNS, "spoke1").Attempt(0).Obj(),
			wantErr:  "spec.attempt",
		},
		"no target": {
			dispatch: tytesting.MakeDispatch("notarget", dispatchNS, "").Obj(),
			wantErr:  "spec.targetName",
		},
		"no workload uid": {
			dispatch: tytesting.MakeDispatch("nouid", dispatchNS, "spoke1").WorkloadUID("").Obj(),
			wantErr:  "spec.workload.uid",
		},
		"no pod sets": {
			dispatch: tytesting.MakeDispatch("nopodsets", dispatchNS, "spoke1").PodSets().Obj(),
			wantErr:  "spec.podSets",
		},
		"snapshot hash not sha256": {
			dispatch: tytesting.MakeDispatch("badhash", dispatchNS, "spoke1").RuntimeHash("md5:abc").Obj(),
			wantErr:  "spec.runtime.hash",
		},
		"topology domain with a value missing": {
			dispatch: tytesting.MakeDispatch("badtopo", dispatchNS, "spoke1").PodSets(v1alpha1.PodSetPlacement{
				Name: "node", Count: 2, Topology: topo([]string{"rack", "kubernetes.io/hostname"}, []string{"r1"}),
			}).Obj(),
			wantErr: "every domain gives one value per level",
		},
		"negative pod count": {
			dispatch: tytesting.MakeDispatch("negcount", dispatchNS, "spoke1").PodSets(v1alpha1.PodSetPlacement{Name: "node", Count: -1}).Obj(),
			wantErr:  "spec.podSets[0].count",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			checkAdmission(t, k8sClient.Create(ctx, tc.dispatch), tc.wantErr)
		})
	}
}

func TestDispatchSpecIsImmutable(t *testing.T) {
	ctx := context.Background()
	d := tytesting.MakeDispatch("immutable", dispatchNS, "spoke1").Obj()
	_ = k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: dispatchNS}})
	if err := k8sClient.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	retarget := d.DeepCopy()
	retarget.Spec.TargetName = "spoke2"
	checkAdmission(t, k8sClient.Update(ctx, retarget), "spec is immutable")

	// Metadata and status stay writable: the agent adds its finalizer and
	// reports phase on the same object.
	d.Finalizers = append(d.Finalizers, v1alpha1.RemoteCleanupFinalizer)
	if err := k8sClient.Update(ctx, d); err != nil {
		t.Fatalf("finalizer update refused: %v", err)
	}
	d.Status.Phase = v1alpha1.DispatchRunning
	if err := k8sClient.Status().Update(ctx, d); err != nil {
		t.Fatalf("status update refused: %v", err)
	}
	d.Status.Phase = "Exploded"
	checkAdmission(t, k8sClient.Status().Update(ctx, d), `Unsupported value: "Exploded"`)
}

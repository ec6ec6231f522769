package jobset

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// shippedDispatch is tytesting.ShippedDispatch, failing t on error.
func shippedDispatch(t *testing.T, runtimePath string, tj *trainer.TrainJob, podSets ...v1alpha1.PodSetPlacement) *v1alpha1.Dispatch {
	t.Helper()
	d, err := tytesting.ShippedDispatch(runtimePath, tj, podSets...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// fluxDispatch is Trainer's LAMMPS example (two nodes, four processes
// each) on Trainer's Flux runtime, both as shipped.
func fluxDispatch(t *testing.T) *v1alpha1.Dispatch {
	t.Helper()
	tj, err := tytesting.ShippedTrainJob(tytesting.TrainerFluxLammpsJob, "team-a")
	if err != nil {
		t.Fatal(err)
	}
	tj.UID = "tj-uid-lammps"
	return shippedDispatch(t, tytesting.TrainerFluxRuntime, tj, v1alpha1.PodSetPlacement{Name: "node", Count: 2})
}

// fluxCompanions splits r's companions into Flux's script ConfigMap and
// curve key Secret, failing on anything else.
func fluxCompanions(t *testing.T, r *Rendered) (*corev1.ConfigMap, *corev1.Secret) {
	t.Helper()
	var cm *corev1.ConfigMap
	var curve *corev1.Secret
	for _, o := range r.Companions {
		switch c := o.(type) {
		case *corev1.ConfigMap:
			cm = c
		case *corev1.Secret:
			curve = c
		case *networkingv1.NetworkPolicy:
		default:
			t.Errorf("unexpected companion %T %s", o, o.GetName())
		}
	}
	if cm == nil || curve == nil || len(r.Companions) != 3 {
		t.Fatalf("companions %v, want Flux's ConfigMap and Secret", r.Companions)
	}
	return cm, curve
}

func TestRenderFluxShipped(t *testing.T) {
	d := fluxDispatch(t)
	r, err := RenderAll(d, RenderOptions{Namespace: testNS})
	if err != nil {
		t.Fatalf("RenderAll: %v", err)
	}
	js, name := r.JobSet, backends.RemoteName(d)
	cm, curve := fluxCompanions(t, r)
	if cm.Name != name+"-flux-entrypoint" || curve.Name != name+"-flux-curve" {
		t.Errorf("companions %s, %s; want %s-flux-entrypoint and %s-flux-curve", cm.Name, curve.Name, name, name)
	}
	for _, o := range r.Companions {
		if o.GetNamespace() != testNS || o.GetLabels()[v1alpha1.LabelDispatchName] != d.Name || len(o.GetOwnerReferences()) != 0 {
			t.Errorf("%T %s: namespace %q labels %v owners %v; want the JobSet's namespace and labels, no owner yet",
				o, o.GetName(), o.GetNamespace(), o.GetLabels(), o.GetOwnerReferences())
		}
	}

	rj := nodeJob(t, js)
	if got := ptr.Deref(rj.Template.Spec.Parallelism, 0); got != 2 {
		t.Errorf("node pods = %d, want the example's 2", got)
	}
	pod := rj.Template.Spec.Template.Spec
	wantCmd := []string{"/bin/bash", "/etc/flux-config/entrypoint.sh", "lmp -v x 4 -v y 4 -v z 4 -in in.reaxc.hns -nocite"}
	if diff := cmp.Diff(wantCmd, pod.Containers[0].Command); diff != "" {
		t.Errorf("trainer command, wrapped by Flux's entrypoint (-want +got):\n%s", diff)
	}
	if len(pod.InitContainers) != 1 || pod.InitContainers[0].Name != "flux-installer" ||
		pod.InitContainers[0].Image != "ghcr.io/converged-computing/flux-view-ubuntu:tag-jammy" {
		t.Errorf("init containers %v, want Flux's installer of the example's view image", pod.InitContainers)
	}
	volumes := map[string]string{}
	for _, v := range pod.Volumes {
		switch {
		case v.ConfigMap != nil:
			volumes[v.Name] = v.ConfigMap.Name
		case v.Secret != nil:
			volumes[v.Name] = v.Secret.SecretName
		}
	}
	if volumes[cm.Name] != cm.Name || volumes["flux-curve"] != curve.Name {
		t.Errorf("pod volumes %v do not mount the companions %s and %s", volumes, cm.Name, curve.Name)
	}

	// The scripts name the JobSet's pods, under the JobSet's subdomain.
	for _, want := range []string{name + "-node-0-[0-1]", name + "." + testNS + ".svc.cluster.local"} {
		if !strings.Contains(cm.Data["init.sh"], want) {
			t.Errorf("init.sh does not name %q", want)
		}
	}
	if !strings.Contains(cm.Data["entrypoint.sh"], "-N 2 -n 8") {
		t.Errorf("entrypoint.sh does not run 2 nodes of 4 tasks:\n%s", cm.Data["entrypoint.sh"])
	}
	if !strings.Contains(string(curve.Data["curve.cert"]), "secret-key = ") {
		t.Error("curve Secret holds no curve certificate")
	}

	// The curve key derives from the TrainJob's UID: a re-render (adopt after
	// a lost Secret) makes the same key the running pods have.
	again, err := RenderAll(d, RenderOptions{Namespace: testNS})
	if err != nil {
		t.Fatalf("second RenderAll: %v", err)
	}
	if _, curve2 := fluxCompanions(t, again); string(curve2.Data["curve.cert"]) != string(curve.Data["curve.cert"]) {
		t.Error("a re-render made another curve key")
	}
}

// TestRenderFluxDefaults: a Flux TrainJob that sets no trainer at all (and
// a snapshot without the CRD's defaults) runs the runtime's node count with
// one process each, where Trainer's plugin would dereference nil.
func TestRenderFluxDefaults(t *testing.T) {
	rt, err := tytesting.ShippedRuntime(tytesting.TrainerFluxRuntime)
	if err != nil {
		t.Fatal(err)
	}
	rt.Spec.MLPolicy.NumNodes = ptr.To[int32](3)
	tj := tytesting.MakeTrainJob("bare", "team-a").RuntimeRef(trainer.ClusterTrainingRuntimeKind, rt.Name).Obj()
	d := tytesting.MakeDispatch("d1", "trainyard-spoke1", "spoke1").
		SnapshotTrainJob(tj).SnapshotRuntime(ctr, rt.Name, rt.Spec).
		PodSets(v1alpha1.PodSetPlacement{Name: "node", Count: 3}).Obj()
	r, err := RenderAll(d, RenderOptions{Namespace: testNS})
	if err != nil {
		t.Fatalf("RenderAll: %v", err)
	}
	if got := ptr.Deref(nodeJob(t, r.JobSet).Template.Spec.Parallelism, 0); got != 3 {
		t.Errorf("node pods = %d, want the runtime's 3", got)
	}
	cm, _ := fluxCompanions(t, r)
	if !strings.Contains(cm.Data["entrypoint.sh"], "-N 3 -n 3") {
		t.Errorf("entrypoint.sh does not run 3 nodes of 1 task:\n%s", cm.Data["entrypoint.sh"])
	}
}

// TestSubmitFluxCompanions: Submit creates Flux's ConfigMap and Secret
// owned by the JobSet, and a Submit after a crash that lost them (adopt)
// makes them again.
func TestSubmitFluxCompanions(t *testing.T) {
	ctx, c := context.Background(), newFakeClient()
	d := fluxDispatch(t)
	name := backends.RemoteName(d)
	companions := []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name + "-flux-entrypoint"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name + "-flux-curve"}},
	}
	check := func(when string) {
		t.Helper()
		for _, o := range companions {
			if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
				t.Fatalf("%s: %T %s: %v", when, o, o.GetName(), err)
			}
			if owners := o.GetOwnerReferences(); len(owners) != 1 || owners[0].Kind != Kind || owners[0].Name != name || !ptr.Deref(owners[0].Controller, false) {
				t.Errorf("%s: %s owners = %v, want the JobSet as controller", when, o.GetName(), owners)
			}
		}
	}
	if _, err := New(c, Options{Namespace: testPrefix}).Submit(ctx, d); err != nil {
		t.Fatalf("Submit: %v", err)
	}
	check("after Submit")
	for _, o := range companions {
		if err := c.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := New(c, Options{Namespace: testPrefix}).Submit(ctx, d); err != nil {
		t.Fatalf("Submit after lost companions: %v", err)
	}
	check("after adopt")
	if got := jobSetNames(t, c); len(got) != 1 {
		t.Errorf("JobSets = %v, want one", got)
	}
}

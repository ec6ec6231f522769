package dispatch

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	trainerac "github.com/kubeflow/trainer/v2/pkg/client/applyconfiguration/trainer/v1alpha1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoapply "k8s.io/client-go/applyconfigurations"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"k8s.io/kube-openapi/pkg/validation/spec"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueuetesting "sigs.k8s.io/kueue/pkg/util/testing/v1beta2"
	"sigs.k8s.io/yaml"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tyt "github.com/trainyard-dev/trainyard/internal/testing"
)

// applied is one status apply the hub sent.
type applied struct {
	owner string
	force bool
	body  map[string]any
}

// trainJobTypeConverter gives the fake client the schema of Trainer v2.3's
// TrainJob CRD, the one the hub's API server serves, so applies merge as
// they do there. (Trainer's generated applyconfiguration package carries an
// empty schema, under which every list would be atomic.)
func trainJobTypeConverter(t *testing.T) managedfields.TypeConverter {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/kubeflow/trainer/v2").Output()
	if err != nil {
		t.Fatalf("locate Trainer's module: %v", err)
	}
	path := filepath.Join(strings.TrimSpace(string(out)), "manifests", "base", "crds", "trainer.kubeflow.org_trainjobs.yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read Trainer's TrainJob CRD: %v", err)
	}
	var crd apiextv1.CustomResourceDefinition
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var schema *apiextv1.JSONSchemaProps
	for _, v := range crd.Spec.Versions {
		if v.Name == trainer.GroupVersion.Version {
			schema = v.Schema.OpenAPIV3Schema
		}
	}
	raw, err = json.Marshal(schema)
	if err != nil {
		t.Fatal(err)
	}
	var model spec.Schema
	if err := json.Unmarshal(raw, &model); err != nil {
		t.Fatalf("TrainJob schema: %v", err)
	}
	gvk := trainer.GroupVersion.WithKind(trainer.TrainJobKind)
	model.AddExtension("x-kubernetes-group-version-kind", []any{
		map[string]any{"group": gvk.Group, "version": gvk.Version, "kind": gvk.Kind},
	})
	tc, err := managedfields.NewTypeConverter(map[string]*spec.Schema{"trainjob": &model}, false)
	if err != nil {
		t.Fatalf("TrainJob type converter: %v", err)
	}
	return tc
}

// statusClient is a fake hub client that applies TrainJob status the way
// the API server does (Trainer's schema: conditions and jobsStatus are
// maps keyed by type and name) and records each apply.
func statusClient(t *testing.T, objs ...client.Object) (client.Client, *[]applied) {
	t.Helper()
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(trainer.AddToScheme(s))
	utilruntime.Must(kueue.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	var log []applied
	c := withDispatchIndexes(fake.NewClientBuilder().WithScheme(s)).WithObjects(objs...).
		WithStatusSubresource(&trainer.TrainJob{}, &kueue.Workload{}, &v1alpha1.Dispatch{}, &v1alpha1.Target{}).WithReturnManagedFields().
		WithTypeConverters(clientgoapply.NewTypeConverter(clientgoscheme.Scheme), trainJobTypeConverter(t),
			managedfields.NewDeducedTypeConverter()).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourceUpdate: func(_ context.Context, _ client.Client, sub string, obj client.Object, _ ...client.SubResourceUpdateOption) error {
				t.Errorf("%s of %T written by update", sub, obj)
				return nil
			},
			SubResourceApply: func(ctx context.Context, c client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
				o := &client.SubResourceApplyOptions{}
				o.ApplyOpts(opts)
				raw, err := json.Marshal(obj)
				if err != nil {
					t.Fatalf("marshal apply: %v", err)
				}
				var body map[string]any
				if err := json.Unmarshal(raw, &body); err != nil {
					t.Fatalf("unmarshal apply: %v", err)
				}
				log = append(log, applied{owner: o.FieldManager, force: ptr.Deref(o.Force, false), body: body})
				return c.SubResource(sub).Apply(ctx, obj, opts...)
			},
		}).Build()
	return c, &log
}

// mirrorState is a Workload of tj whose live Dispatch reports phase with one
// replicated job "node" of two pods.
func mirrorState(tj *trainer.TrainJob, phase v1alpha1.DispatchPhase) *state {
	wl := kueuetesting.MakeWorkload("wl", tj.Namespace).Obj()
	wl.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: trainer.GroupVersion.String(), Kind: trainer.TrainJobKind, Name: tj.Name, UID: tj.UID, Controller: ptr.To(true),
	}}
	d := tyt.MakeDispatch("d", "agents", "spoke-1").Attempt(1).Phase(phase).
		Remote(&v1alpha1.RemoteRef{Kind: "JobSet", Namespace: "jobs", Name: "train-1"}).Obj()
	d.Status.Replicas = []v1alpha1.ReplicaStatus{{Name: "node", Active: 2, Ready: 2}}
	return &state{wl: wl, check: "trainyard", checkState: kueue.CheckStateReady, live: d}
}

// trainJobOfOthers is a TrainJob whose status other writers have filled:
// Trainer's progress (a field trainyard's Go types know but do not own) and
// a condition trainyard does not write.
func trainJobOfOthers(t *testing.T, c client.Client, tj *trainer.TrainJob) {
	t.Helper()
	others := trainerac.TrainJob(tj.Name, tj.Namespace).WithStatus(trainerac.TrainJobStatus().
		WithTrainerStatus(trainerac.TrainerStatus().WithProgressPercentage(40)).
		WithConditions(metav1ac.Condition().WithType("Checkpointed").WithStatus(metav1.ConditionTrue).
			WithReason("Saved").WithMessage("step 400").WithLastTransitionTime(metav1.Now())))
	if err := c.Status().Apply(context.Background(), others, client.FieldOwner("trainer"), client.ForceOwnership); err != nil {
		t.Fatalf("status by another writer: %v", err)
	}
}

func conditionTypes(conds []metav1.Condition) []string {
	var out []string
	for _, c := range conds {
		out = append(out, c.Type)
	}
	slices.Sort(out)
	return out
}

// appliedShape summarises an apply body: its top-level keys, its status keys
// and the condition types and job names it sets.
type appliedShape struct {
	Owner      string
	Force      bool
	Keys       []string
	StatusKeys []string
	Conditions []string
	Jobs       []string
}

func shapeOf(a applied) appliedShape {
	keys := func(m map[string]any) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	sh := appliedShape{Owner: a.owner, Force: a.force, Keys: keys(a.body)}
	status, _ := a.body["status"].(map[string]any)
	sh.StatusKeys = keys(status)
	for _, c := range asList(status["conditions"]) {
		sh.Conditions = append(sh.Conditions, c["type"].(string))
	}
	for _, j := range asList(status["jobsStatus"]) {
		sh.Jobs = append(sh.Jobs, j["name"].(string))
	}
	slices.Sort(sh.Conditions)
	return sh
}

func asList(v any) []map[string]any {
	l, _ := v.([]any)
	var out []map[string]any
	for _, x := range l {
		out = append(out, x.(map[string]any))
	}
	return out
}

// mirroredRunning is a TrainJob whose status other writers filled, once the
// hub has mirrored a Running Dispatch into it; the log holds the hub's
// applies only.
func mirroredRunning(t *testing.T) (*trainer.TrainJob, client.Client, *Reconciler, *[]applied) {
	t.Helper()
	tj := tyt.MakeTrainJob("train", "team-a").Obj()
	tj.UID = "uid-train"
	c, log := statusClient(t, tj)
	trainJobOfOthers(t, c, tj)
	*log = nil
	r := NewReconciler(c, c, record.NewFakeRecorder(10), clocktesting.NewFakeClock(t0), Options{})
	if _, err := r.mirrorToTrainJob(context.Background(), mirrorState(tj, v1alpha1.DispatchRunning)); err != nil {
		t.Fatalf("mirror: %v", err)
	}
	return tj, c, r, log
}

// TestMirrorAppliesOnlyOwnedFields: the mirror sends jobsStatus and
// trainyard's conditions, as trainyard-hub by server-side apply, and what
// other writers put in the status stays.
func TestMirrorAppliesOnlyOwnedFields(t *testing.T) {
	ctx := context.Background()
	tj, c, r, log := mirroredRunning(t)
	want := []appliedShape{{
		Owner: FieldOwner, Force: true, Keys: []string{"apiVersion", "kind", "metadata", "status"},
		StatusKeys: []string{"conditions", "jobsStatus"}, Conditions: []string{v1alpha1.TrainJobCreated, v1alpha1.TrainJobRunning}, Jobs: []string{"node"},
	}}
	var got []appliedShape
	for _, a := range *log {
		got = append(got, shapeOf(a))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("applies (-want +got):\n%s", diff)
	}
	for _, a := range *log {
		if md := a.body["metadata"].(map[string]any); md["uid"] != "uid-train" {
			t.Errorf("apply metadata = %v, want the TrainJob's UID as precondition", md)
		}
	}

	var after trainer.TrainJob
	if err := c.Get(ctx, client.ObjectKeyFromObject(tj), &after); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"Checkpointed", v1alpha1.TrainJobCreated, v1alpha1.TrainJobRunning}, conditionTypes(after.Status.Conditions)); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}
	if after.Status.TrainerStatus == nil || ptr.Deref(after.Status.TrainerStatus.ProgressPercentage, 0) != 40 {
		t.Errorf("trainerStatus = %+v, want Trainer's progress kept", after.Status.TrainerStatus)
	}
	wantJobs := []trainer.JobStatus{{Name: "node", Active: ptr.To[int32](2), Ready: ptr.To[int32](2),
		Succeeded: ptr.To[int32](0), Failed: ptr.To[int32](0), Suspended: ptr.To[int32](0)}}
	if diff := cmp.Diff(wantJobs, after.Status.JobsStatus); diff != "" {
		t.Errorf("jobsStatus (-want +got):\n%s", diff)
	}

	// Nothing changed: nothing is written.
	*log = nil
	if _, err := r.mirrorToTrainJob(ctx, mirrorState(tj, v1alpha1.DispatchRunning)); err != nil {
		t.Fatalf("second mirror: %v", err)
	}
	if len(*log) != 0 {
		t.Errorf("unchanged status written again: %v", *log)
	}

	// Kueue's unsuspend bumps the generation (the fake client does not, so
	// the test does); the remote work is as it was, so nothing is written
	// either.
	after.Spec.Suspend = ptr.To(false)
	after.Generation++
	if err := c.Update(ctx, &after); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(tj), &after); err != nil || after.Generation <= tj.Generation {
		t.Fatalf("generation after the unsuspend = %d (err %v), want above %d", after.Generation, err, tj.Generation)
	}
	if _, err := r.mirrorToTrainJob(ctx, mirrorState(&after, v1alpha1.DispatchRunning)); err != nil {
		t.Fatalf("mirror after the unsuspend: %v", err)
	}
	if len(*log) != 0 {
		t.Errorf("a new generation alone wrote the status again: %v", *log)
	}
}

// TestEveryApplyCarriesAllOwnedFields: a field trainyard-hub leaves out of
// an apply is removed, so zeroing a torn-down job's active counts must
// still send its Created and Running conditions.
func TestEveryApplyCarriesAllOwnedFields(t *testing.T) {
	ctx := context.Background()
	tj, c, r, log := mirroredRunning(t)
	// The job is torn down before it finished: its counts go to zero.
	if err := r.clearActive(ctx, mirrorState(tj, v1alpha1.DispatchCancelled)); err != nil {
		t.Fatalf("clearActive: %v", err)
	}
	var after trainer.TrainJob
	if err := c.Get(ctx, client.ObjectKeyFromObject(tj), &after); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"Checkpointed", v1alpha1.TrainJobCreated, v1alpha1.TrainJobRunning}, conditionTypes(after.Status.Conditions)); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}
	if len(after.Status.JobsStatus) != 1 || ptr.Deref(after.Status.JobsStatus[0].Active, -1) != 0 || ptr.Deref(after.Status.JobsStatus[0].Ready, -1) != 0 {
		t.Errorf("jobsStatus = %+v, want node with no active or ready pods", after.Status.JobsStatus)
	}
	if after.Status.TrainerStatus == nil {
		t.Error("trainerStatus erased")
	}
	for _, a := range *log {
		if a.owner != FieldOwner || !a.force {
			t.Errorf("apply as %q (force %v), want %q with force", a.owner, a.force, FieldOwner)
		}
	}
}

func TestJobsStatus(t *testing.T) {
	cases := map[string]struct {
		replicas []v1alpha1.ReplicaStatus
		want     []trainer.JobStatus
	}{
		"no replicas": {},
		"empty replicas": {
			replicas: []v1alpha1.ReplicaStatus{},
		},
		"one pod set": {
			replicas: []v1alpha1.ReplicaStatus{{Name: "node", Active: 2, Ready: 1, Succeeded: 3, Failed: 4}},
			want: []trainer.JobStatus{{Name: "node", Active: ptr.To[int32](2), Ready: ptr.To[int32](1),
				Succeeded: ptr.To[int32](3), Failed: ptr.To[int32](4), Suspended: ptr.To[int32](0)}},
		},
		"zeros are explicit and order is kept": {
			replicas: []v1alpha1.ReplicaStatus{{Name: "node"}, {Name: "launcher", Active: 1}},
			want: []trainer.JobStatus{
				{Name: "node", Active: ptr.To[int32](0), Ready: ptr.To[int32](0), Succeeded: ptr.To[int32](0), Failed: ptr.To[int32](0), Suspended: ptr.To[int32](0)},
				{Name: "launcher", Active: ptr.To[int32](1), Ready: ptr.To[int32](0), Succeeded: ptr.To[int32](0), Failed: ptr.To[int32](0), Suspended: ptr.To[int32](0)},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, jobsStatus(tc.replicas)); diff != "" {
				t.Errorf("jobsStatus (-want +got):\n%s", diff)
			}
		})
	}
}

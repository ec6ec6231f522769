package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	jobset "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

const ns = "team-a"

func testScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(trainer.AddToScheme(s))
	utilruntime.Must(jobset.AddToScheme(s)) // Trainer's runtime code builds JobSets
	return s
}

func newClient(objs ...client.Object) client.WithWatch {
	return fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(objs...).Build()
}

func trainingRuntime(name, namespace string, spec trainer.TrainingRuntimeSpec) *trainer.TrainingRuntime {
	return &trainer.TrainingRuntime{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Spec: spec}
}

func mustEncode(t *testing.T, v any) ([]byte, string) {
	t.Helper()
	raw, hash, err := Encode(v)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	return raw, hash
}

var hashPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

func TestEncode(t *testing.T) {
	withLabels := func(labels map[string]string) trainer.TrainingRuntimeSpec {
		spec := tytesting.TorchRuntimeSpec(2)
		spec.Template.Spec.ReplicatedJobs[0].Template.Labels = labels
		return spec
	}
	// Built in opposite insertion orders; Go randomizes map iteration too.
	forward, backward := map[string]string{}, map[string]string{}
	for i := range 16 {
		forward[fmt.Sprintf("k%02d", i)] = "v"
		backward[fmt.Sprintf("k%02d", 15-i)] = "v"
	}
	changedImage := tytesting.TorchRuntimeSpec(2)
	changedImage.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0].Image = "other:1"

	cases := map[string]struct {
		a, b      any
		wantEqual bool
	}{
		"equal specs":                {a: tytesting.TorchRuntimeSpec(2), b: tytesting.TorchRuntimeSpec(2), wantEqual: true},
		"map order does not matter":  {a: withLabels(forward), b: withLabels(backward), wantEqual: true},
		"a changed count":            {a: tytesting.TorchRuntimeSpec(2), b: tytesting.TorchRuntimeSpec(3)},
		"a changed image":            {a: tytesting.TorchRuntimeSpec(2), b: changedImage},
		"a changed map value":        {a: withLabels(map[string]string{"a": "1"}), b: withLabels(map[string]string{"a": "2"})},
		"an added map key":           {a: withLabels(map[string]string{"a": "1"}), b: withLabels(map[string]string{"a": "1", "b": "1"})},
		"nil and empty fields agree": {a: withLabels(nil), b: withLabels(map[string]string{}), wantEqual: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rawA, hashA := mustEncode(t, tc.a)
			for range 8 { // repeated encodes must agree whatever the map iteration order
				if _, again := mustEncode(t, tc.a); again != hashA {
					t.Fatalf("Encode is not deterministic: %s then %s", hashA, again)
				}
			}
			_, hashB := mustEncode(t, tc.b)
			if (hashA == hashB) != tc.wantEqual {
				t.Errorf("hashes %s and %s: equal=%v, want %v", hashA, hashB, hashA == hashB, tc.wantEqual)
			}
			if !hashPattern.MatchString(hashA) {
				t.Errorf("hash %q does not match %s", hashA, hashPattern)
			}
			sum := sha256.Sum256(rawA)
			if want := "sha256:" + hex.EncodeToString(sum[:]); hashA != want {
				t.Errorf("hash %s is not the sha256 of the raw JSON (%s)", hashA, want)
			}
		})
	}
}

// TestTrainJobSnapshot: the Dispatch's TrainJob is the job as the hub runs
// it: runtimeRef on the pinned copy, without the hub-only fields, the job
// itself unchanged.
func TestTrainJobSnapshot(t *testing.T) {
	c := newClient(tytesting.MakeClusterTrainingRuntime("torch-distributed").Obj())
	tj := tytesting.MakeTrainJob("train", ns).Suspend(true).NumNodes(2).GPUsPerNode(4).Obj()
	mustPin(t, c, tj)
	tj.UID = "tj-uid"
	tj.Spec.ManagedBy = ptr.To("kueue.x-k8s.io/multikueue")
	orig := tj.DeepCopy()
	rt, err := Take(context.Background(), c, tj)
	if err != nil {
		t.Fatal(err)
	}

	got, err := TrainJob(tj, rt)
	if err != nil {
		t.Fatalf("TrainJob: %v", err)
	}
	if got.Name != "train" || got.UID != "tj-uid" {
		t.Errorf("snapshot names %s/%s, want train/tj-uid", got.Name, got.UID)
	}
	var spec trainer.TrainJobSpec
	if err := json.Unmarshal(got.Spec.Raw, &spec); err != nil {
		t.Fatalf("decode snapshot spec: %v", err)
	}
	want := orig.Spec.DeepCopy()
	want.Suspend, want.ManagedBy = nil, nil
	want.RuntimeRef = trainer.RuntimeRef{Name: copyName(t, tj), APIGroup: ptr.To(trainer.GroupVersion.Group), Kind: ptr.To(trainer.TrainingRuntimeKind)}
	if diff := cmp.Diff(*want, spec); diff != "" {
		t.Errorf("snapshot spec (-want +got):\n%s", diff)
	}
	var fields map[string]any
	if err := json.Unmarshal(got.Spec.Raw, &fields); err != nil {
		t.Fatalf("decode snapshot spec: %v", err)
	}
	for _, f := range []string{"suspend", "managedBy"} {
		if _, ok := fields[f]; ok {
			t.Errorf("snapshot spec keeps %q: %s", f, got.Spec.Raw)
		}
	}
	if diff := cmp.Diff(orig, tj); diff != "" {
		t.Errorf("TrainJob changed the job (-before +after):\n%s", diff)
	}
}

// copyName is the name of the pinned copy tj's pin annotations name.
func copyName(t *testing.T, tj *trainer.TrainJob) string {
	t.Helper()
	ref, err := PinnedRef(tj)
	if err != nil {
		t.Fatalf("PinnedRef of %s: %v", tj.Name, err)
	}
	return ref.Name
}

// TestResolve: how a runtimeRef is resolved, pinned or not (Take adds the
// pin requirement, TestTakeRefusesUnpinned).
func TestResolve(t *testing.T) {
	clusterSpec, nsSpec, otherNSSpec := tytesting.TorchRuntimeSpec(1), tytesting.TorchRuntimeSpec(2), tytesting.TorchRuntimeSpec(3)
	objs := []client.Object{
		tytesting.MakeClusterTrainingRuntime("torch-distributed").Spec(clusterSpec).Obj(),
		trainingRuntime("mine", ns, nsSpec),
		trainingRuntime("mine", "team-b", otherNSSpec),
		trainingRuntime("theirs", "team-b", otherNSSpec),
	}
	job := func(mutate func(*trainer.RuntimeRef)) *trainer.TrainJob {
		tj := tytesting.MakeTrainJob("train", ns).Obj()
		mutate(&tj.Spec.RuntimeRef)
		return tj
	}
	cases := map[string]struct {
		tj       *trainer.TrainJob
		getErr   error
		wantKind v1alpha1.RuntimeKind
		wantName string
		wantSpec trainer.TrainingRuntimeSpec
		wantErr  error
	}{
		"kind defaults to ClusterTrainingRuntime": {
			tj:       job(func(r *trainer.RuntimeRef) { r.Kind = nil }),
			wantKind: v1alpha1.RuntimeKindClusterTrainingRuntime, wantName: "torch-distributed", wantSpec: clusterSpec,
		},
		"apiGroup defaults to Trainer's": {
			tj:       job(func(r *trainer.RuntimeRef) { r.APIGroup = nil }),
			wantKind: v1alpha1.RuntimeKindClusterTrainingRuntime, wantName: "torch-distributed", wantSpec: clusterSpec,
		},
		"an explicit ClusterTrainingRuntime": {
			tj:       job(func(*trainer.RuntimeRef) {}),
			wantKind: v1alpha1.RuntimeKindClusterTrainingRuntime, wantName: "torch-distributed", wantSpec: clusterSpec,
		},
		"a TrainingRuntime is read from the job's namespace": {
			tj: job(func(r *trainer.RuntimeRef) {
				r.Name, r.Kind = "mine", ptr.To(trainer.TrainingRuntimeKind)
			}),
			wantKind: v1alpha1.RuntimeKindTrainingRuntime, wantName: "mine", wantSpec: nsSpec,
		},
		"a TrainingRuntime of another namespace is not found": {
			tj: job(func(r *trainer.RuntimeRef) {
				r.Name, r.Kind = "theirs", ptr.To(trainer.TrainingRuntimeKind)
			}),
			wantErr: ErrRuntimeNotFound,
		},
		"a missing ClusterTrainingRuntime": {
			tj:      job(func(r *trainer.RuntimeRef) { r.Name = "nope" }),
			wantErr: ErrRuntimeNotFound,
		},
		"another apiGroup": {
			tj:      job(func(r *trainer.RuntimeRef) { r.APIGroup = ptr.To("example.com") }),
			wantErr: ErrUnsupportedRuntime,
		},
		"another kind": {
			tj:      job(func(r *trainer.RuntimeRef) { r.Kind = ptr.To("JobSetRuntime") }),
			wantErr: ErrUnsupportedRuntime,
		},
		"other read errors are not called not-found": {
			tj:     job(func(*trainer.RuntimeRef) {}),
			getErr: apierrors.NewForbidden(schema.GroupResource{Group: "trainer.kubeflow.org", Resource: "clustertrainingruntimes"}, "torch-distributed", errors.New("rbac")),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(objs...)
			if tc.getErr != nil {
				b = b.WithInterceptorFuncs(interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
					return tc.getErr
				}})
			}
			got, err := resolve(context.Background(), b.Build(), tc.tj)
			switch {
			case tc.getErr != nil:
				if !errors.Is(err, tc.getErr) || errors.Is(err, ErrRuntimeNotFound) {
					t.Fatalf("resolve error = %v, want %v unchanged", err, tc.getErr)
				}
				return
			case !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil):
				t.Fatalf("resolve error = %v, want %v", err, tc.wantErr)
			case err != nil:
				return
			}
			raw, hash := mustEncode(t, tc.wantSpec)
			want := &v1alpha1.RuntimeSnapshot{Kind: tc.wantKind, Name: tc.wantName, Hash: hash, Spec: runtime.RawExtension{Raw: raw}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("snapshot (-want +got):\n%s", diff)
			}
		})
	}
}

// pinnedCopies lists the pinned TrainingRuntimes of namespace.
func pinnedCopies(t *testing.T, c client.Reader, namespace string) []trainer.TrainingRuntime {
	t.Helper()
	var list trainer.TrainingRuntimeList
	if err := c.List(context.Background(), &list, client.InNamespace(namespace), client.HasLabels{v1alpha1.LabelPinnedRuntime}); err != nil {
		t.Fatalf("list runtimes: %v", err)
	}
	return list.Items
}

func mustPin(t *testing.T, c client.Client, tj *trainer.TrainJob) {
	t.Helper()
	if err := Pin(context.Background(), c, c, tj); err != nil {
		t.Fatalf("Pin %s: %v", tj.Name, err)
	}
}

func TestPinCreatesCopy(t *testing.T) {
	cases := map[string]struct {
		source     client.Object
		ref        func(*tytesting.TrainJobWrapper) *tytesting.TrainJobWrapper
		sourceName string
	}{
		"from a ClusterTrainingRuntime": {
			source:     tytesting.MakeClusterTrainingRuntime("torch-distributed").Obj(),
			ref:        func(w *tytesting.TrainJobWrapper) *tytesting.TrainJobWrapper { return w },
			sourceName: "ClusterTrainingRuntime/torch-distributed",
		},
		"from a TrainingRuntime": {
			source: trainingRuntime("mine", ns, tytesting.TorchRuntimeSpec(1)),
			ref: func(w *tytesting.TrainJobWrapper) *tytesting.TrainJobWrapper {
				return w.RuntimeRef(trainer.TrainingRuntimeKind, "mine")
			},
			sourceName: "TrainingRuntime/mine",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := newClient(tc.source)
			tj := tc.ref(tytesting.MakeTrainJob("train", ns)).Obj()
			userRef := tj.Spec.RuntimeRef
			mustPin(t, c, tj)

			_, hash := mustEncode(t, tytesting.TorchRuntimeSpec(1))
			wantName := pinnedName(tc.source.GetName(), hash)
			if diff := cmp.Diff(userRef, tj.Spec.RuntimeRef); diff != "" {
				t.Errorf("Pin changed runtimeRef (-user +got):\n%s", diff)
			}
			if got := copyName(t, tj); got != wantName {
				t.Errorf("pinned to %q, want %q", got, wantName)
			}
			wantAnn := map[string]string{v1alpha1.AnnotationRuntimeSource: tc.sourceName, v1alpha1.AnnotationRuntimeHash: hash}
			if diff := cmp.Diff(wantAnn, tj.Annotations); diff != "" {
				t.Errorf("TrainJob annotations (-want +got):\n%s", diff)
			}
			copies := pinnedCopies(t, c, ns)
			if len(copies) != 1 {
				t.Fatalf("got %d pinned copies, want 1", len(copies))
			}
			got := copies[0]
			if _, err := time.Parse(time.RFC3339, got.Annotations[v1alpha1.AnnotationPinnedAt]); err != nil {
				t.Errorf("pinned copy's %s: %v", v1alpha1.AnnotationPinnedAt, err)
			}
			delete(got.Annotations, v1alpha1.AnnotationPinnedAt)
			want := trainer.TrainingRuntime{
				ObjectMeta: metav1.ObjectMeta{Name: wantName, Namespace: ns,
					Labels: map[string]string{v1alpha1.LabelPinnedRuntime: "true"}, Annotations: wantAnn},
				Spec: tytesting.TorchRuntimeSpec(1),
			}
			if diff := cmp.Diff(want.ObjectMeta, got.ObjectMeta, cmpIgnoreServerMeta); diff != "" {
				t.Errorf("pinned copy metadata (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(want.Spec, got.Spec); diff != "" {
				t.Errorf("pinned copy spec (-want +got):\n%s", diff)
			}
			// The copy's own snapshot has the same hash: pinning preserves content.
			pinnedSnap, err := Take(context.Background(), c, tj)
			if err != nil {
				t.Fatalf("Take of the pinned job: %v", err)
			}
			if pinnedSnap.Hash != hash {
				t.Errorf("pinned copy hashes %s, the source %s", pinnedSnap.Hash, hash)
			}
		})
	}
}

var cmpIgnoreServerMeta = cmp.FilterPath(func(p cmp.Path) bool {
	switch p.Last().String() {
	case ".ResourceVersion", ".TypeMeta":
		return true
	}
	return false
}, cmp.Ignore())

func TestPinReusesCopyOfSameContent(t *testing.T) {
	c := newClient(tytesting.MakeClusterTrainingRuntime("torch-distributed").Obj())
	first, second := tytesting.MakeTrainJob("first", ns).Obj(), tytesting.MakeTrainJob("second", ns).Obj()
	mustPin(t, c, first)
	mustPin(t, c, second) // the copy exists: Create meets AlreadyExists
	if a, b := copyName(t, first), copyName(t, second); a != b {
		t.Errorf("jobs of equal content pinned to different copies %s and %s", a, b)
	}
	if n := len(pinnedCopies(t, c, ns)); n != 1 {
		t.Errorf("got %d pinned copies, want 1", n)
	}
}

// TestPinRefusesPresetAnnotations: a job that arrives with either pin
// annotation is refused, whatever runtime it names, and nothing is pinned.
func TestPinRefusesPresetAnnotations(t *testing.T) {
	for _, key := range []string{v1alpha1.AnnotationRuntimeSource, v1alpha1.AnnotationRuntimeHash} {
		t.Run(key, func(t *testing.T) {
			c := newClient(tytesting.MakeClusterTrainingRuntime("torch-distributed").Obj())
			tj := tytesting.MakeTrainJob("train", ns).Obj()
			tj.Annotations = map[string]string{key: "sha256:0123"}
			before := tj.DeepCopy()
			if err := Pin(context.Background(), c, c, tj); !errors.Is(err, ErrPresetPin) {
				t.Fatalf("Pin error = %v, want %v", err, ErrPresetPin)
			}
			if diff := cmp.Diff(before, tj); diff != "" {
				t.Errorf("a refused Pin changed the job (-before +after):\n%s", diff)
			}
			if n := len(pinnedCopies(t, c, ns)); n != 0 {
				t.Errorf("got %d pinned copies, want none", n)
			}
		})
	}
}

func TestPinDifferentContentGetsNewCopy(t *testing.T) {
	c := newClient(tytesting.MakeClusterTrainingRuntime("torch-distributed").Obj())
	before := tytesting.MakeTrainJob("before", ns).Obj()
	mustPin(t, c, before)
	var src trainer.ClusterTrainingRuntime
	if err := c.Get(context.Background(), client.ObjectKey{Name: "torch-distributed"}, &src); err != nil {
		t.Fatal(err)
	}
	src.Spec = tytesting.TorchRuntimeSpec(4)
	if err := c.Update(context.Background(), &src); err != nil {
		t.Fatal(err)
	}
	after := tytesting.MakeTrainJob("after", ns).Obj()
	mustPin(t, c, after)
	if copyName(t, before) == copyName(t, after) {
		t.Errorf("both jobs pinned to %s although the runtime changed in between", copyName(t, after))
	}
	if before.Annotations[v1alpha1.AnnotationRuntimeHash] == after.Annotations[v1alpha1.AnnotationRuntimeHash] {
		t.Errorf("both jobs record hash %s", after.Annotations[v1alpha1.AnnotationRuntimeHash])
	}
	copies := pinnedCopies(t, c, ns)
	if len(copies) != 2 {
		t.Fatalf("got %d pinned copies, want 2", len(copies))
	}
	var old trainer.TrainingRuntime
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: copyName(t, before)}, &old); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(tytesting.TorchRuntimeSpec(1), old.Spec); diff != "" {
		t.Errorf("the first copy changed (-want +got):\n%s", diff)
	}
}

func TestPinErrors(t *testing.T) {
	cases := map[string]struct {
		objs      []client.Object
		createErr error
		wantErr   error
	}{
		"the runtime is missing": {wantErr: ErrRuntimeNotFound},
		"creating the copy fails": {
			objs:      []client.Object{tytesting.MakeClusterTrainingRuntime("torch-distributed").Obj()},
			createErr: apierrors.NewServiceUnavailable("etcd is down"),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(tc.objs...)
			if tc.createErr != nil {
				b = b.WithInterceptorFuncs(interceptor.Funcs{Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
					return tc.createErr
				}})
			}
			c := b.Build()
			tj := tytesting.MakeTrainJob("train", ns).Obj()
			before := tj.DeepCopy()
			err := Pin(context.Background(), c, c, tj)
			want := tc.wantErr
			if want == nil {
				want = tc.createErr
			}
			if !errors.Is(err, want) {
				t.Fatalf("Pin error = %v, want %v", err, want)
			}
			if diff := cmp.Diff(before, tj); diff != "" {
				t.Errorf("a failed Pin changed the job (-before +after):\n%s", diff)
			}
		})
	}
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

func TestPinnedName(t *testing.T) {
	hash := "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	other := "sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
	long := "a-very-long-runtime-name-that-someone-wrote-for-torch-distributed-with-fsdp"
	cases := map[string]struct {
		source, hash, want string
	}{
		"a short name keeps its name":   {source: "torch-distributed", hash: hash, want: "torch-distributed-0123456789ab"},
		"another hash, another name":    {source: "torch-distributed", hash: other, want: "torch-distributed-fedcba987654"},
		"a long name is cut at 50":      {source: long, hash: hash, want: long[:50] + "-0123456789ab"},
		"a cut ending in a dash":        {source: strings.Repeat("a", 49) + "-tail", hash: hash, want: strings.Repeat("a", 49) + "-0123456789ab"},
		"a cut ending in dashes":        {source: strings.Repeat("b", 47) + "---tail", hash: hash, want: strings.Repeat("b", 47) + "-0123456789ab"},
		"a cut ending in a dot":         {source: strings.Repeat("c", 48) + ".-x", hash: hash, want: strings.Repeat("c", 48) + "-0123456789ab"},
		"a name of exactly 50 is kept":  {source: long[:50], hash: hash, want: long[:50] + "-0123456789ab"},
		"a 63-character name is capped": {source: long[:63], hash: hash, want: long[:50] + "-0123456789ab"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := pinnedName(tc.source, tc.hash)
			if got != tc.want {
				t.Errorf("pinnedName(%q) = %q, want %q", tc.source, got, tc.want)
			}
			if len(got) > 63 || !dnsLabel.MatchString(got) {
				t.Errorf("pinnedName(%q) = %q (%d bytes) is not a DNS label", tc.source, got, len(got))
			}
		})
	}
}

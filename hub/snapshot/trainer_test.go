package snapshot

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	kftrainerruntime "github.com/kubeflow/trainer/v2/pkg/runtime"
	kftrainercore "github.com/kubeflow/trainer/v2/pkg/runtime/core"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/yaml"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

type noopIndexer struct{}

func (noopIndexer) IndexField(context.Context, client.Object, string, client.IndexerFunc) error {
	return nil
}

// trainerSnapshots runs Trainer v2.3's own runtime code on tj, which writes
// the snapshot ConfigMap exactly as Trainer's TrainJob controller does, and
// returns that ConfigMap.
func trainerSnapshots(t *testing.T, c client.WithWatch, tj *trainer.TrainJob) *corev1.ConfigMap {
	t.Helper()
	ctx := context.Background()
	runtimes, err := kftrainercore.New(ctx, withKinds(c), noopIndexer{}, nil)
	if err != nil {
		t.Fatalf("Trainer runtimes: %v", err)
	}
	rt := runtimes[kftrainerruntime.RuntimeRefToRuntimeRegistryKey(tj.Spec.RuntimeRef)]
	if _, err := rt.NewObjects(ctx, tj); err != nil {
		t.Fatalf("Trainer NewObjects: %v", err)
	}
	var cm corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: tj.Namespace, Name: tj.Name + TrainerSnapshotSuffix}, &cm); err != nil {
		t.Fatalf("Trainer wrote no snapshot: %v", err)
	}
	return &cm
}

// withKinds makes c's reads set kind and apiVersion, as the cache-backed
// client Trainer's controller reads runtimes through does
// (controller-runtime's cache_reader.go); Trainer's snapshot YAML carries
// the kind it later checks.
func withKinds(c client.WithWatch) client.WithWatch {
	return interceptor.NewClient(c, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			gvk, err := c.GroupVersionKindFor(obj)
			if err != nil {
				return err
			}
			obj.GetObjectKind().SetGroupVersionKind(gvk)
			return nil
		},
	})
}

// pinnedToTrainingRuntime returns a created TrainJob pinned to a TrainingRuntime holding
// spec, and that runtime.
func pinnedToTrainingRuntime(spec trainer.TrainingRuntimeSpec) (*trainer.TrainJob, *trainer.TrainingRuntime) {
	_, hash, _ := Encode(spec)
	rt := trainingRuntime(pinnedName("torch", hash), ns, spec)
	rt.Labels = map[string]string{v1alpha1.LabelPinnedRuntime: "true"}
	tj := tytesting.MakeTrainJob("train", ns).RuntimeRef(trainer.TrainingRuntimeKind, rt.Name).Obj()
	tj.UID = "uid-train"
	tj.Annotations = map[string]string{v1alpha1.AnnotationRuntimeSource: "ClusterTrainingRuntime/torch", v1alpha1.AnnotationRuntimeHash: hash}
	return tj, rt
}

func TestTakeUsesTrainersSnapshot(t *testing.T) {
	spec, other := tytesting.TorchRuntimeSpec(2), tytesting.TorchRuntimeSpec(5)
	_, otherHash := mustEncode(t, other)
	setData := func(f func(*snapshotRuntime)) func(*corev1.ConfigMap) {
		return func(cm *corev1.ConfigMap) {
			var rt snapshotRuntime
			mustUnmarshalYAML(t, cm.Data[TrainerSnapshotKey], &rt)
			f(&rt)
			cm.Data[TrainerSnapshotKey] = mustMarshalYAML(t, &rt)
		}
	}
	cases := map[string]struct {
		editSnapshot  func(*corev1.ConfigMap)
		deleteRuntime bool
		noPinHash     bool
		wantSpec      *trainer.TrainingRuntimeSpec
		wantErr       error
		wantMsg       string
	}{
		"Trainer's snapshot of the pinned copy agrees": {wantSpec: &spec},
		"the runtime is gone: Trainer's snapshot, checked against the pinned hash": {
			deleteRuntime: true, wantSpec: &spec,
		},
		"the runtime is gone and the job was never pinned: Trainer's snapshot as it is": {
			deleteRuntime: true, noPinHash: true,
			editSnapshot: setData(func(rt *snapshotRuntime) { rt.Spec = other }), wantSpec: &other,
		},
		"another spec than the pinned copy is refused": {
			editSnapshot: setData(func(rt *snapshotRuntime) { rt.Spec = other }),
			wantErr:      ErrSnapshotMismatch, wantMsg: "holds " + otherHash,
		},
		"another spec than the pinned hash, with the runtime gone, is refused": {
			deleteRuntime: true,
			editSnapshot:  setData(func(rt *snapshotRuntime) { rt.Spec = other }),
			wantErr:       ErrSnapshotMismatch, wantMsg: "the hash recorded when it was pinned",
		},
		"a snapshot of another runtime is refused": {
			editSnapshot: setData(func(rt *snapshotRuntime) { rt.Metadata.Name = "torch-other" }),
			wantErr:      ErrSnapshotMismatch, wantMsg: `TrainingRuntime "torch-other"`,
		},
		"a snapshot of another kind is refused": {
			editSnapshot: setData(func(rt *snapshotRuntime) { rt.Kind = trainer.ClusterTrainingRuntimeKind }),
			wantErr:      ErrSnapshotMismatch,
		},
		"a snapshot without its key is refused": {
			editSnapshot: func(cm *corev1.ConfigMap) { delete(cm.Data, TrainerSnapshotKey) },
			wantErr:      ErrSnapshotMismatch, wantMsg: `no "runtime" key`,
		},
		"an unreadable snapshot is refused": {
			editSnapshot: func(cm *corev1.ConfigMap) { cm.Data[TrainerSnapshotKey] = "spec: [" },
			wantErr:      ErrSnapshotMismatch,
		},
		"a ConfigMap controlled by an earlier job of the same name is not this job's": {
			editSnapshot: func(cm *corev1.ConfigMap) {
				cm.OwnerReferences[0].UID = "uid-earlier"
				cm.Data[TrainerSnapshotKey] = "not a runtime"
			},
			wantSpec: &spec,
		},
		"a ConfigMap nobody controls is not this job's": {
			editSnapshot: func(cm *corev1.ConfigMap) {
				cm.OwnerReferences[0].Controller = ptr.To(false)
				cm.Data[TrainerSnapshotKey] = "not a runtime"
			},
			wantSpec: &spec,
		},
		"without the runtime, a ConfigMap that is not this job's does not stand in": {
			deleteRuntime: true,
			editSnapshot:  func(cm *corev1.ConfigMap) { cm.OwnerReferences[0].UID = "uid-earlier" },
			wantErr:       ErrRuntimeNotFound,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			tj, rt := pinnedToTrainingRuntime(spec)
			if tc.noPinHash {
				tj.Annotations = nil
			}
			c := newClient(rt, tj)
			cm := trainerSnapshots(t, c, tj)
			if tc.editSnapshot != nil {
				tc.editSnapshot(cm)
				if err := c.Update(ctx, cm); err != nil {
					t.Fatalf("edit snapshot: %v", err)
				}
			}
			if tc.deleteRuntime {
				if err := c.Delete(ctx, rt); err != nil {
					t.Fatalf("delete runtime: %v", err)
				}
			}
			take := Take
			if tc.noPinHash {
				take = resolve // Take refuses a job without its pin (TestTakeRefusesUnpinned)
			}
			got, err := take(ctx, c, tj)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("Take error = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				if !strings.Contains(err.Error(), tc.wantMsg) {
					t.Errorf("Take error = %q, want it to say %q", err, tc.wantMsg)
				}
				return
			}
			raw, hash := mustEncode(t, *tc.wantSpec)
			want := &v1alpha1.RuntimeSnapshot{Kind: v1alpha1.RuntimeKindTrainingRuntime, Name: rt.Name, Hash: hash, Spec: runtime.RawExtension{Raw: raw}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("snapshot (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTakeSnapshotFromClusterRuntime: Trainer's snapshot of a
// ClusterTrainingRuntime (a job that was never pinned, which Take refuses
// but the resolution under it reads) is read the same way.
func TestTakeSnapshotFromClusterRuntime(t *testing.T) {
	ctx := context.Background()
	spec := tytesting.TorchRuntimeSpec(3)
	crt := tytesting.MakeClusterTrainingRuntime("torch-distributed").Spec(spec).Obj()
	tj := tytesting.MakeTrainJob("train", ns).Obj()
	tj.UID = "uid-train"
	c := newClient(crt, tj)
	trainerSnapshots(t, c, tj)
	if err := c.Delete(ctx, crt); err != nil {
		t.Fatalf("delete runtime: %v", err)
	}
	got, err := resolve(ctx, c, tj)
	if err != nil {
		t.Fatalf("resolve: %v", err)
	}
	_, hash := mustEncode(t, spec)
	if got.Hash != hash || got.Kind != v1alpha1.RuntimeKindClusterTrainingRuntime || got.Name != "torch-distributed" {
		t.Errorf("Take = %s %s %s, want ClusterTrainingRuntime torch-distributed %s", got.Kind, got.Name, got.Hash, hash)
	}
}

// TestTakeSnapshotReads: a job not created yet (the pinning webhook) costs no
// ConfigMap read, and a failed read is an error, never "no snapshot".
func TestTakeSnapshotReads(t *testing.T) {
	spec := tytesting.TorchRuntimeSpec(2)
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "train"+TrainerSnapshotSuffix, errors.New("rbac"))
	for name, tc := range map[string]struct {
		uid       types.UID
		wantReads int
		wantErr   error
	}{
		"a job without a UID":      {wantReads: 0},
		"a read error is an error": {uid: "uid-train", wantReads: 1, wantErr: forbidden},
	} {
		t.Run(name, func(t *testing.T) {
			tj, rt := pinnedToTrainingRuntime(spec)
			tj.UID = tc.uid
			reads := 0
			c := fake.NewClientBuilder().WithScheme(testScheme()).WithObjects(rt).WithInterceptorFuncs(interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if _, ok := obj.(*corev1.ConfigMap); ok {
						reads++
						return forbidden
					}
					return c.Get(ctx, key, obj, opts...)
				},
			}).Build()
			_, err := Take(context.Background(), c, tj)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Errorf("Take error = %v, want %v", err, tc.wantErr)
			}
			if reads != tc.wantReads {
				t.Errorf("ConfigMap reads = %d, want %d", reads, tc.wantReads)
			}
		})
	}
}

func mustUnmarshalYAML(t *testing.T, data string, v any) {
	t.Helper()
	if err := yaml.Unmarshal([]byte(data), v); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
}

func mustMarshalYAML(t *testing.T, v any) string {
	t.Helper()
	raw, err := yaml.Marshal(v)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return string(raw)
}

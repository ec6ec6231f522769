package snapshot

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	tyt "github.com/trainyard-dev/trainyard/internal/testing"
)

// pinnedJob is a TrainJob as the pinning webhook leaves it: runtimeRef on
// the copy of ClusterTrainingRuntime torch-distributed, pin annotations,
// and numNodes when numNodes is set.
func pinnedUpdateBase(numNodes *int32) *trainer.TrainJob {
	tj := tyt.MakeTrainJob("train", ns).Queue("q").Obj()
	tj.Spec.RuntimeRef = trainer.RuntimeRef{Name: "torch-distributed-0123456789ab",
		APIGroup: ptr.To(trainer.GroupVersion.Group), Kind: ptr.To(trainer.TrainingRuntimeKind)}
	tj.Annotations = map[string]string{AnnotationSource: "ClusterTrainingRuntime/torch-distributed", AnnotationHash: "sha256:0123456789ab", "team": "a"}
	if numNodes != nil {
		tj.Spec.Trainer = &trainer.Trainer{NumNodes: numNodes}
	}
	return tj
}

// admitted is tj as Kueue leaves it admitted: unsuspended, with its
// runtime patch.
func admitted(tj *trainer.TrainJob) *trainer.TrainJob {
	tj.Spec.Suspend = ptr.To(false)
	tj.Spec.RuntimePatches = []trainer.RuntimePatch{{Manager: "user"}, {Manager: KueuePatchManager,
		TrainingRuntimeSpec: &trainer.TrainingRuntimeSpecPatch{Template: &trainer.JobSetTemplatePatch{Spec: &trainer.JobSetSpecPatch{}}}}}
	return tj
}

// TestKeepPin: an update that sends back what the user wrote (the source
// runtime, no pin annotations, no defaulted numNodes) keeps what pinning
// set; any other change is left for the API server and the policy to judge.
func TestKeepPin(t *testing.T) {
	source := trainer.RuntimeRef{Name: "torch-distributed", APIGroup: ptr.To(trainer.GroupVersion.Group), Kind: ptr.To(trainer.ClusterTrainingRuntimeKind)}
	cases := map[string]struct {
		old         *trainer.TrainJob
		update      func(*trainer.TrainJob)
		wantChanged bool
		// want is the update after KeepPin; nil: old.
		want func(*trainer.TrainJob)
	}{
		"re-applied manifest": {
			old: pinnedUpdateBase(nil),
			update: func(tj *trainer.TrainJob) {
				tj.Spec.RuntimeRef = source
				delete(tj.Annotations, AnnotationSource)
				delete(tj.Annotations, AnnotationHash)
			},
			wantChanged: true,
		},
		"source without group and kind, as the API server defaults them": {
			old:         pinnedUpdateBase(nil),
			update:      func(tj *trainer.TrainJob) { tj.Spec.RuntimeRef = trainer.RuntimeRef{Name: "torch-distributed"} },
			wantChanged: true,
		},
		"a defaulted numNodes dropped": {
			old:         pinnedUpdateBase(ptr.To[int32](2)),
			update:      func(tj *trainer.TrainJob) { tj.Spec.Trainer = nil },
			wantChanged: true,
		},
		"unchanged": {old: pinnedUpdateBase(nil), update: func(*trainer.TrainJob) {}},
		"a re-apply saying suspend: true, of a job Kueue admitted": {
			old: admitted(pinnedUpdateBase(nil)),
			update: func(tj *trainer.TrainJob) {
				tj.Spec.RuntimeRef = source
				tj.Spec.Suspend = ptr.To(true)
			},
			wantChanged: true,
		},
		"Kueue suspending the job it admitted": {
			old:    admitted(pinnedUpdateBase(nil)),
			update: func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(true) },
			want:   func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(true) },
		},
		"Kueue's runtime patch dropped by a server-side apply": {
			old: admitted(pinnedUpdateBase(nil)),
			update: func(tj *trainer.TrainJob) {
				tj.Spec.RuntimeRef = source
				tj.Spec.RuntimePatches = tj.Spec.RuntimePatches[:1] // the user's own stays in the manifest
			},
			wantChanged: true,
		},
		"another runtime stays, to be refused as immutable": {
			old: pinnedUpdateBase(nil),
			update: func(tj *trainer.TrainJob) {
				tj.Spec.RuntimeRef = trainer.RuntimeRef{Name: "mpi-distributed", Kind: ptr.To(trainer.ClusterTrainingRuntimeKind)}
			},
			want: func(tj *trainer.TrainJob) {
				tj.Spec.RuntimeRef = trainer.RuntimeRef{Name: "mpi-distributed", Kind: ptr.To(trainer.ClusterTrainingRuntimeKind)}
			},
		},
		"a merge patch of the source's name alone, the pinned kind kept": {
			old: pinnedUpdateBase(nil),
			update: func(tj *trainer.TrainJob) {
				tj.Spec.RuntimeRef.Name = "torch-distributed"
			},
			wantChanged: true,
		},
		"another kind of the source's name is another runtime": {
			old: pinnedUpdateBase(nil),
			update: func(tj *trainer.TrainJob) {
				tj.Spec.RuntimeRef = trainer.RuntimeRef{Name: "torch-distributed", Kind: ptr.To("OtherRuntime")}
			},
			want: func(tj *trainer.TrainJob) {
				tj.Spec.RuntimeRef = trainer.RuntimeRef{Name: "torch-distributed", Kind: ptr.To("OtherRuntime")}
			},
		},
		"a changed pin annotation stays, to be refused by the policy": {
			old:    pinnedUpdateBase(nil),
			update: func(tj *trainer.TrainJob) { tj.Annotations[AnnotationHash] = "sha256:other" },
			want:   func(tj *trainer.TrainJob) { tj.Annotations[AnnotationHash] = "sha256:other" },
		},
		"a changed numNodes stays, to be refused as immutable": {
			old:    pinnedUpdateBase(ptr.To[int32](2)),
			update: func(tj *trainer.TrainJob) { tj.Spec.Trainer = &trainer.Trainer{Image: ptr.To("other")} },
			want:   func(tj *trainer.TrainJob) { tj.Spec.Trainer = &trainer.Trainer{Image: ptr.To("other")} },
		},
		"an unpinned job is not ours": {
			old: tyt.MakeTrainJob("train", ns).Queue("q").Obj(),
			update: func(tj *trainer.TrainJob) {
				tj.Spec.RuntimeRef = trainer.RuntimeRef{Name: "other"}
			},
			want: func(tj *trainer.TrainJob) { tj.Spec.RuntimeRef = trainer.RuntimeRef{Name: "other"} },
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tj := tc.old.DeepCopy()
			tc.update(tj)
			if got := KeepPin(tc.old, tj); got != tc.wantChanged {
				t.Errorf("KeepPin = %v, want %v", got, tc.wantChanged)
			}
			want := tc.old.DeepCopy()
			if tc.want != nil {
				tc.want(want)
			}
			if diff := cmp.Diff(want, tj); diff != "" {
				t.Errorf("update after KeepPin (-want +got):\n%s", diff)
			}
		})
	}
}

// TestKeepPinWebhookPatch: the webhook answers a re-apply with the patch
// that turns it back into the stored object.
func TestKeepPinWebhookPatch(t *testing.T) {
	old := pinnedUpdateBase(nil)
	tj := old.DeepCopy()
	tj.Spec.RuntimeRef = trainer.RuntimeRef{Name: "torch-distributed"}
	delete(tj.Annotations, AnnotationHash)
	req := admissionRequest(t, admissionv1.Update, tj, true)
	oldRaw, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	req.OldObject = runtime.RawExtension{Raw: oldRaw}
	resp := KeepPinWebhook{}.Handle(context.Background(), req)
	if !resp.Allowed {
		t.Fatalf("refused: %v", resp.Result)
	}
	if diff := cmp.Diff(old, patched(t, req, resp)); diff != "" {
		t.Errorf("patched update (-stored +got):\n%s", diff)
	}
	req.Operation = admissionv1.Create
	if resp := (KeepPinWebhook{}).Handle(context.Background(), req); !resp.Allowed || len(resp.Patches) != 0 {
		t.Errorf("a create: allowed %v, %d patches; want allowed untouched", resp.Allowed, len(resp.Patches))
	}
}

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

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// pinnedUpdateBase is a TrainJob as the pinning webhook leaves it: the
// user's runtimeRef and the pin annotations.
func pinnedUpdateBase() *trainer.TrainJob {
	tj := tytesting.MakeTrainJob("train", ns).Queue("q").Obj()
	tj.Annotations = map[string]string{v1alpha1.AnnotationRuntimeSource: "ClusterTrainingRuntime/torch-distributed", v1alpha1.AnnotationRuntimeHash: "sha256:0123456789ab", "team": "a"}
	return tj
}

// admitted is tj as Kueue's integration leaves it admitted: unsuspended,
// with its runtime patch beside the user's.
func admitted(tj *trainer.TrainJob) *trainer.TrainJob {
	tj.Spec.Suspend = ptr.To(false)
	tj.Spec.RuntimePatches = []trainer.RuntimePatch{{Manager: "user"}, {Manager: v1alpha1.KueueRuntimePatchManager,
		TrainingRuntimeSpec: &trainer.TrainingRuntimeSpecPatch{Template: &trainer.JobSetTemplatePatch{Spec: &trainer.JobSetSpecPatch{}}}}}
	return tj
}

// TestKeepPin: an update that drops the pin annotations (a server-side
// apply by the manager that created the job) or Kueue's runtime patch (a
// manifest listing runtimePatches), or that suspends an admitted job (a
// manifest saying suspend: true), keeps them as they were; the hub's Kueue
// integration still suspends; any other change is left for the API server
// and the policy to judge.
func TestKeepPin(t *testing.T) {
	cases := map[string]struct {
		old         *trainer.TrainJob
		update      func(*trainer.TrainJob)
		manager     string
		wantChanged bool
		// want is the update after KeepPin; nil: old.
		want func(*trainer.TrainJob)
	}{
		"both pin annotations dropped": {
			old: pinnedUpdateBase(),
			update: func(tj *trainer.TrainJob) {
				delete(tj.Annotations, v1alpha1.AnnotationRuntimeSource)
				delete(tj.Annotations, v1alpha1.AnnotationRuntimeHash)
			},
			wantChanged: true,
		},
		"every annotation dropped": {
			old:         pinnedUpdateBase(),
			update:      func(tj *trainer.TrainJob) { tj.Annotations = nil },
			want:        func(tj *trainer.TrainJob) { delete(tj.Annotations, "team") },
			wantChanged: true,
		},
		"one dropped": {
			old:         pinnedUpdateBase(),
			update:      func(tj *trainer.TrainJob) { delete(tj.Annotations, v1alpha1.AnnotationRuntimeHash) },
			wantChanged: true,
		},
		"unchanged": {old: pinnedUpdateBase(), update: func(*trainer.TrainJob) {}},
		"Kueue's runtime patch dropped by a manifest's runtimePatches": {
			old:         admitted(pinnedUpdateBase()),
			update:      func(tj *trainer.TrainJob) { tj.Spec.RuntimePatches = tj.Spec.RuntimePatches[:1] },
			manager:     "kubectl-client-side-apply",
			wantChanged: true,
		},
		"a re-apply saying suspend: true, of an admitted job": {
			old:         admitted(pinnedUpdateBase()),
			update:      func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(true) },
			manager:     "kubectl",
			wantChanged: true,
		},
		"the hub's Kueue integration suspending the job it admitted": {
			old:     admitted(pinnedUpdateBase()),
			update:  func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(true) },
			manager: KueueFieldManager,
			want:    func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(true) },
		},
		"the hub's Kueue integration unsuspending": {
			old:     pinnedUpdateBase(),
			update:  func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false) },
			manager: KueueFieldManager,
			want:    func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false) },
		},
		"another runtime stays, to be refused as immutable": {
			old:    pinnedUpdateBase(),
			update: func(tj *trainer.TrainJob) { tj.Spec.RuntimeRef = trainer.RuntimeRef{Name: "mpi-distributed"} },
			want:   func(tj *trainer.TrainJob) { tj.Spec.RuntimeRef = trainer.RuntimeRef{Name: "mpi-distributed"} },
		},
		"a changed pin annotation stays, to be refused by the policy": {
			old:    pinnedUpdateBase(),
			update: func(tj *trainer.TrainJob) { tj.Annotations[v1alpha1.AnnotationRuntimeHash] = "sha256:other" },
			want:   func(tj *trainer.TrainJob) { tj.Annotations[v1alpha1.AnnotationRuntimeHash] = "sha256:other" },
		},
		"an unpinned job is not ours": {
			old:    tytesting.MakeTrainJob("train", ns).Queue("q").Obj(),
			update: func(tj *trainer.TrainJob) { tj.Annotations = map[string]string{"x": "y"} },
			want:   func(tj *trainer.TrainJob) { tj.Annotations = map[string]string{"x": "y"} },
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tj := tc.old.DeepCopy()
			tc.update(tj)
			if got := KeepPin(tc.old, tj, tc.manager); got != tc.wantChanged {
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
	old := pinnedUpdateBase()
	tj := old.DeepCopy()
	delete(tj.Annotations, v1alpha1.AnnotationRuntimeHash)
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

package snapshot

import (
	"context"
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// TestPinnedRuntimeDefaultsFluxNodes: a Flux TrainJob written as the
// Trainer docs write it (no trainer section) runs on the hub with the
// runtime's numNodes, so Trainer's Flux plugin, which Kueue's pod sets and
// the remote render run, has one to read; the user's spec stays as written.
func TestPinnedRuntimeDefaultsFluxNodes(t *testing.T) {
	flux, err := tytesting.ShippedRuntime(tytesting.TrainerFluxRuntime)
	if err != nil {
		t.Fatal(err)
	}
	wantNodes := ptr.Deref(flux.Spec.MLPolicy.NumNodes, 1)
	torch := tytesting.MakeClusterTrainingRuntime("torch-distributed").Obj()
	cases := map[string]struct {
		runtime string
		trainer *trainer.Trainer
		want    *trainer.Trainer
	}{
		"Flux, no trainer": {runtime: flux.Name, want: &trainer.Trainer{NumNodes: ptr.To(wantNodes)}},
		"Flux, a command but no numNodes": {runtime: flux.Name, trainer: &trainer.Trainer{Command: []string{"lmp"}},
			want: &trainer.Trainer{Command: []string{"lmp"}, NumNodes: ptr.To(wantNodes)}},
		"Flux, numNodes given": {runtime: flux.Name, trainer: &trainer.Trainer{NumNodes: ptr.To[int32](7)},
			want: &trainer.Trainer{NumNodes: ptr.To[int32](7)}},
		"torch, no trainer: left alone": {runtime: torch.Name, want: nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := newClient(flux, torch)
			tj := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: ns}}
			tj.Spec.RuntimeRef = trainer.RuntimeRef{Name: tc.runtime}
			tj.Spec.Trainer = tc.trainer
			mustPin(t, c, tj)
			written := tj.DeepCopy()
			snap, err := Take(context.Background(), c, tj)
			if err != nil {
				t.Fatal(err)
			}
			var spec trainer.TrainingRuntimeSpec
			if err := decodeSpec(snap.Spec.Raw, &spec); err != nil {
				t.Fatal(err)
			}
			view, err := WithPinnedRuntime(tj, &spec)
			if err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(written, tj) {
				t.Errorf("the user's job changed: trainer %+v, was %+v", tj.Spec.Trainer, written.Spec.Trainer)
			}
			got, want := view.Spec.Trainer, tc.want
			if (got == nil) != (want == nil) || (got != nil && (ptr.Deref(got.NumNodes, -1) != ptr.Deref(want.NumNodes, -1) || len(got.Command) != len(want.Command))) {
				t.Errorf("trainer = %+v, want %+v", got, want)
			}
		})
	}
}

package backends

import (
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"k8s.io/utils/ptr"
)

func TestNumNodes(t *testing.T) {
	job := func(n *int32) *trainer.TrainJobSpec {
		return &trainer.TrainJobSpec{Trainer: &trainer.Trainer{NumNodes: n}}
	}
	runtime := func(n *int32) *trainer.TrainingRuntimeSpec {
		return &trainer.TrainingRuntimeSpec{MLPolicy: &trainer.MLPolicy{NumNodes: n}}
	}
	cases := map[string]struct {
		tj   *trainer.TrainJobSpec
		rt   *trainer.TrainingRuntimeSpec
		want int32
	}{
		"the TrainJob's":                {tj: job(ptr.To[int32](4)), rt: runtime(ptr.To[int32](2)), want: 4},
		"else the runtime's":            {tj: job(nil), rt: runtime(ptr.To[int32](2)), want: 2},
		"no trainer section":            {tj: &trainer.TrainJobSpec{}, rt: runtime(ptr.To[int32](3)), want: 3},
		"else 1":                        {tj: job(nil), rt: runtime(nil), want: 1},
		"no mlPolicy":                   {tj: &trainer.TrainJobSpec{}, rt: &trainer.TrainingRuntimeSpec{}, want: 1},
		"the TrainJob's 0 is not unset": {tj: job(ptr.To[int32](0)), rt: runtime(ptr.To[int32](2)), want: 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := NumNodes(tc.tj, tc.rt); got != tc.want {
				t.Errorf("NumNodes = %d, want %d", got, tc.want)
			}
		})
	}
}

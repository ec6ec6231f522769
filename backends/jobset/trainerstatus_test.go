package jobset

import (
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"k8s.io/utils/ptr"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/kubework"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// TestTrainerStatusOnlyOnTheTrainerStep: of a JobSet with an initializer
// step, only the trainer step's pods get Trainer's status variables and
// token volume, for the hub TrainJob, as Trainer's plugin does.
func TestTrainerStatusOnlyOnTheTrainerStep(t *testing.T) {
	rt, err := tytesting.ShippedRuntime(tytesting.TrainerTorchtuneLlama1B)
	if err != nil {
		t.Fatal(err)
	}
	tj := tytesting.MakeTrainJob("tune", "team-a").RuntimeRef(trainer.ClusterTrainingRuntimeKind, rt.Name).Obj()
	tj.Spec.Initializer = &trainer.Initializer{Dataset: &trainer.DatasetInitializer{StorageUri: ptr.To("hf://team-a/data")}}
	d := shippedDispatch(t, tytesting.TrainerTorchtuneLlama1B, tj, v1alpha1.PodSetPlacement{Name: "dataset-initializer", Count: 1},
		v1alpha1.PodSetPlacement{Name: "model-initializer", Count: 1}, v1alpha1.PodSetPlacement{Name: "node", Count: 1})
	js := mustRender(t, d)
	withTrainerStatus(js, kubework.StatusEndpoint{BaseURL: "https://agent.trainyard.svc:9443", CAConfigMap: "trainyard-status-ca"}, d)
	for _, rj := range js.Spec.ReplicatedJobs {
		spec := rj.Template.Spec.Template.Spec
		got := ""
		for _, e := range spec.Containers[0].Env {
			if e.Name == kubework.EnvTrainerServerURL {
				got = e.Value
			}
		}
		want := ""
		if rj.Name == "node" {
			want = "https://agent.trainyard.svc:9443/apis/trainer.kubeflow.org/v1alpha1/namespaces/" + d.Spec.Workload.Namespace + "/trainjobs/" + d.Spec.TrainJob.Name + "/status"
		}
		if got != want {
			t.Errorf("%s: %s = %q, want %q", rj.Name, kubework.EnvTrainerServerURL, got, want)
		}
	}
}

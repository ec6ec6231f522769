package jobset

import (
	trainerconstants "github.com/kubeflow/trainer/v2/pkg/constants"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/kubework"
)

// withTrainerStatus gives the trainer's pods of js Trainer's status
// variables and token volume for d's hub TrainJob, as Trainer's
// TrainJobStatus plugin gives the trainer step's pods. It runs on the
// agent only, after the render the hub shares: the endpoint is the agent's.
func withTrainerStatus(js *jobsetv1alpha2.JobSet, ep kubework.StatusEndpoint, d *v1alpha1.Dispatch) {
	for i := range js.Spec.ReplicatedJobs {
		tmpl := &js.Spec.ReplicatedJobs[i].Template
		if tmpl.Labels[trainerconstants.LabelTrainJobAncestor] != trainerconstants.AncestorTrainer {
			continue
		}
		kubework.WithTrainerStatus(&tmpl.Spec.Template.Spec, ep, d.Spec.Workload.Namespace, d.Spec.TrainJob.Name)
	}
}

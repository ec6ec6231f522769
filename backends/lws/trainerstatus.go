package lws

import (
	trainerconstants "github.com/kubeflow/trainer/v2/pkg/constants"
	corev1 "k8s.io/api/core/v1"
	lwsv1 "sigs.k8s.io/lws/api/leaderworkerset/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/kubework"
)

// withTrainerStatus gives the trainer's pods of lws (the leader's and the
// workers' templates, each a trainer step of the JobSet it was mapped
// from) Trainer's status variables and token volume for d's hub TrainJob,
// as the JobSet backend does. It runs on the agent only, after the render
// the hub shares: the endpoint is the agent's.
func withTrainerStatus(lws *lwsv1.LeaderWorkerSet, ep kubework.StatusEndpoint, d *v1alpha1.Dispatch) {
	tmpl := &lws.Spec.LeaderWorkerTemplate
	for _, pt := range []*corev1.PodTemplateSpec{tmpl.LeaderTemplate, &tmpl.WorkerTemplate} {
		if pt == nil || pt.Labels[trainerconstants.LabelTrainJobAncestor] != trainerconstants.AncestorTrainer {
			continue
		}
		kubework.WithTrainerStatus(&pt.Spec, ep, d.Spec.Workload.Namespace, d.Spec.TrainJob.Name)
	}
}

package lws

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	lwsapi "sigs.k8s.io/lws/api/leaderworkerset/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/backends/lws"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// TestSubmitRefusesWhatAGroupCannotHold: Trainer's Flux, torchtune and
// cache runtimes, as shipped, are refused by Submit for the reason Eligible
// gives the hub, and nothing of theirs is made on the spoke.
func TestSubmitRefusesWhatAGroupCannotHold(t *testing.T) {
	node := v1alpha1.PodSetPlacement{Name: "node", Count: 1}
	dataset := v1alpha1.PodSetPlacement{Name: "dataset-initializer", Count: 1}
	model := v1alpha1.PodSetPlacement{Name: "model-initializer", Count: 1}
	cases := map[string]struct {
		runtime string
		podSets []v1alpha1.PodSetPlacement
		want    error
	}{
		"Flux":                         {runtime: tytesting.TrainerFluxRuntime, podSets: []v1alpha1.PodSetPlacement{node}, want: lws.ErrFlux},
		"volume claim policies":        {runtime: tytesting.TrainerTorchtuneLlama1B, podSets: []v1alpha1.PodSetPlacement{dataset, model, node}, want: lws.ErrVolumeClaimPolicies},
		"initializer before the nodes": {runtime: tytesting.TrainerTorchWithCache, podSets: []v1alpha1.PodSetPlacement{dataset, node}, want: lws.ErrInitializers},
	}
	b := newBackend(t)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, g := context.Background(), NewWithT(t)
			d, err := tytesting.ShippedDispatch(tc.runtime, nil, tc.podSets...)
			g.Expect(err).NotTo(HaveOccurred())
			d.Name = "refused"
			ref, err := b.Submit(ctx, d)
			g.Expect(ref).To(BeNil())
			g.Expect(errors.Is(err, backends.ErrRejected)).To(BeTrue(), "Submit = %v, want a rejection", err)
			g.Expect(errors.Is(err, tc.want)).To(BeTrue(), "Submit = %v, want %v", err, tc.want)
			tj := tytesting.MakeTrainJob("train", "team-a").Obj()
			g.Expect(errors.Is(lws.CheckRuntime(tytesting.MustShippedRuntimeSpec(tc.runtime), &tj.Spec), tc.want)).To(BeTrue(), "CheckRuntime disagrees with Submit")

			mine := client.MatchingLabels{v1alpha1.LabelDispatchName: d.Name}
			var sets lwsapi.LeaderWorkerSetList
			var cms corev1.ConfigMapList
			var secrets corev1.SecretList
			for _, l := range []client.ObjectList{&sets, &cms, &secrets} {
				g.Expect(spoke.Client.List(ctx, l, client.InNamespace(jobsNS), mine)).To(Succeed())
			}
			g.Expect(sets.Items).To(BeEmpty())
			g.Expect(cms.Items).To(BeEmpty())
			g.Expect(secrets.Items).To(BeEmpty())
		})
	}
}

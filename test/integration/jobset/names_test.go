package jobset

import (
	"context"
	"strings"
	"testing"

	"github.com/kubeflow/trainer/v2/pkg/constants"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetapi "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// initializer20 is a replicated-job name of the 20 characters Trainer
// allows (v2.4); the longest Trainer ships, dataset-initializer, has 19.
const initializer20 = "checkpoint-downloads"

// TestLongestNamesPassJobSetsWebhook: a TrainJob of 63 characters, in a
// namespace of 63, whose runtime has a 20-character replicated job before
// its 16 torch nodes, becomes a JobSet that JobSet's own webhook admits:
// every Job, pod and service name it generates is a DNS label. The same
// JobSet under the 40-character names remote work used to get is refused,
// so the webhook does check.
func TestLongestNamesPassJobSetsWebhook(t *testing.T) {
	ctx, g := context.Background(), NewWithT(t)
	name63 := "llama-fine-tune-" + strings.Repeat("x", 40) + "-run-07"
	g.Expect(name63).To(HaveLen(63))
	tj := tytesting.MakeTrainJob(name63, "n"+strings.Repeat("s", 62)).Queue("lq").Suspend(true).NumNodes(16).Obj()
	spec := kwokRuntime(map[string]string{"kwok.trainyard.dev/run-for": "1h"})
	init := *spec.Template.Spec.ReplicatedJobs[0].DeepCopy()
	init.Name = initializer20
	// An initializer step, as Trainer's torch-distributed-with-cache has.
	init.Template.Labels = map[string]string{constants.LabelTrainJobAncestor: constants.DatasetInitializer}
	init.Template.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
	spec.Template.Spec.ReplicatedJobs = append([]jobsetapi.ReplicatedJob{init}, spec.Template.Spec.ReplicatedJobs...)
	d := tytesting.MakeDispatch("names", "trainyard-spoke", "spoke").SnapshotTrainJob(tj).
		SnapshotRuntime(v1alpha1.RuntimeKindClusterTrainingRuntime, "with-initializer", spec).
		PodSets(v1alpha1.PodSetPlacement{Name: initializer20, Count: 1}, v1alpha1.PodSetPlacement{Name: "node", Count: 16}).Obj()
	d.Spec.Workload.Name = "trainjob-" + name63 + "-1a2b3"
	d.Spec.Workload.Namespace = tj.Namespace
	d.Spec.Attempt = 2147483647 // the longest attempt number

	b := newBackend()
	ref, err := b.Submit(ctx, d)
	g.Expect(err).NotTo(HaveOccurred(), "JobSet's webhook refused the JobSet of a 63-character TrainJob")
	t.Cleanup(func() {
		g.Eventually(func() (bool, error) { return b.Cancel(ctx, d) }, util.Timeout, util.Interval).Should(BeTrue())
	})
	var js jobsetapi.JobSet
	g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &js)).To(Succeed())
	g.Expect(js.Spec.ReplicatedJobs).To(HaveLen(2))
	g.Expect(js.Spec.ReplicatedJobs[0].Name).To(Equal(initializer20))
	for k, v := range js.Labels {
		g.Expect(validation.IsValidLabelValue(v)).To(BeEmpty(), "label %s=%q", k, v)
	}

	// Pods of both replicated jobs are made, with names the API server took.
	g.Eventually(func(g Gomega) {
		pods := podsOf(g, ref.Name)
		g.Expect(pods).To(ContainElement(HaveField("Labels", HaveKeyWithValue(jobsetapi.ReplicatedJobNameKey, initializer20))))
	}, util.Timeout, util.Interval).Should(Succeed())

	// The 40-byte name the same job got before: prefix, 10 hex, attempt.
	old := &jobsetapi.JobSet{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: name63[:26] + "-0123456789-a1"}, Spec: js.Spec}
	old.Spec.Network = nil
	err = spoke.Client.Create(ctx, old)
	g.Expect(err).To(MatchError(ContainSubstring("pod names generated for this JobSet will exceed 63 characters")))
}

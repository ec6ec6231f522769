package slurmdispatch

import (
	"context"
	"strings"
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// spokeReady waits until the kwok spoke's Target is Available with free
// CPU: a candidate placement would pick for a job asking for no GPUs.
func spokeReady(t *testing.T) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		var tg v1alpha1.Target
		g.Expect(env.fleet.Hub.Client.Get(context.Background(), client.ObjectKey{Name: spokeName}, &tg)).To(Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(tg.Status.Conditions, v1alpha1.TargetAvailable)).To(BeTrue(), "%v", tg.Status.Conditions)
		g.Expect(tg.Status.Free.Cpu().IsZero()).To(BeFalse(), "spoke publishes no free CPU")
	}, util.Timeout, util.Interval).Should(Succeed())
}

// TestFlavorlessJobStaysOnItsQueuesTarget (issue 26): a TrainJob that asks
// for nothing the Slurm-only queue covers is admitted with no flavor; it
// runs on the Slurm target, never on the spoke that fits it better but
// serves none of the queue's flavors.
func TestFlavorlessJobStaysOnItsQueuesTarget(t *testing.T) {
	spokeReady(t)
	makeRuntime(t, "flavorless", tytesting.TorchRuntimeSpec(1))
	tj := submit(t, tytesting.MakeTrainJob("cpu-only", tenant).Queue(queue).
		RuntimeRef(trainer.ClusterTrainingRuntimeKind, "flavorless").NumNodes(1).
		Command([]string{"python3"}, "-c", "print('cpu-only ran')").Obj())
	g := NewWithT(t)
	wl := util.WorkloadOf(g, env.fleet.Hub.Client, tj)
	g.Eventually(func(g Gomega) {
		g.Expect(env.fleet.Hub.Client.Get(context.Background(), client.ObjectKeyFromObject(wl), wl)).To(Succeed())
		g.Expect(wl.Status.Admission).NotTo(BeNil())
		for _, a := range wl.Status.Admission.PodSetAssignments {
			g.Expect(a.Flavors).To(BeEmpty(), "pod set %s was admitted with a flavor", a.Name)
		}
	}, util.Timeout, util.Interval).Should(Succeed())
	d := dispatchOf(t, tj, phaseIs(v1alpha1.DispatchSucceeded))
	if d.Spec.TargetName != targetName {
		t.Errorf("dispatched to %s, want %s (the only target of the queue's flavor %s)", d.Spec.TargetName, targetName, flavor)
	}
	if out := output(t, d); !strings.Contains(out, "cpu-only ran") {
		t.Errorf("output lacks the job's line:\n%s", out)
	}
}

// TestImageTheHostDoesNotStandFor (issue 26): the Target runs commands on
// its nodes' host. A job naming an image its host environment does not
// stand for is not placed there, and the TrainJob says which image and
// target; once the administrator lists the image, the job runs on the host.
func TestImageTheHostDoesNotStandFor(t *testing.T) {
	const image = "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727"
	makeRuntime(t, "image-job", tytesting.TorchRuntimeSpec(1))
	job := func(name string) *trainer.TrainJob {
		tj := trainJob(name, "image-job", 1, 1, "python3", "-c", "print('ran on the host')")
		tj.Spec.Trainer.Image = ptr.To(image)
		return tj
	}

	t.Run("not placed, with the reason", func(t *testing.T) {
		tj := submit(t, job("mnist-refused"))
		cond := trainJobCondition(t, tj, trainer.TrainJobFailed)
		want := `hpc: image "` + image + `" cannot run here: this target runs commands on its nodes' host, with no container runtime`
		if cond.Reason != v1alpha1.ReasonDispatchRejected || !strings.Contains(cond.Message, want) {
			t.Errorf("Failed condition %s: %q, want %s containing %q", cond.Reason, cond.Message, v1alpha1.ReasonDispatchRejected, want)
		}
		g := NewWithT(t)
		var list v1alpha1.DispatchList
		g.Expect(env.fleet.Hub.Client.List(context.Background(), &list,
			client.MatchingLabels{v1alpha1.LabelWorkloadUID: string(util.WorkloadOf(g, env.fleet.Hub.Client, tj).UID)})).To(Succeed())
		g.Expect(list.Items).To(BeEmpty(), "a Dispatch was written for a job no target can run")
	})

	t.Run("runs once the host stands for it", func(t *testing.T) {
		updateTarget(t, func(s *v1alpha1.TargetSpec) {
			s.Images.HostEnvironment = append(s.Images.HostEnvironment, "docker.io/kubeflowkatib/*")
		})
		tj := submit(t, job("mnist-hosted"))
		d := dispatchOf(t, tj, phaseIs(v1alpha1.DispatchSucceeded))
		if out := output(t, d); !strings.Contains(out, "ran on the host") {
			t.Errorf("output lacks the job's line:\n%s", out)
		}
	})
}

package dispatch

import (
	"context"
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// TestMPITrainJobRunsOnSpoke: an OpenMPI TrainJob goes the whole way. Kueue
// admits its launcher and node pod sets, trainyard places them on one spoke,
// the agent creates the JobSet with its key Secret and hostfile, and the job
// completes on the hub.
func TestMPITrainJobRunsOnSpoke(t *testing.T) {
	g := NewWithT(t)
	ctx, c := context.Background(), env.fleet.Hub.Client
	rt := tytesting.MakeClusterTrainingRuntime("mpi-quick").Spec(tytesting.MPIRuntimeSpec(1, 4)).
		Toleration(kube.KwokToleration).PodAnnotation("kwok.trainyard.dev/run-for", "3s").Obj()
	g.Expect(c.Create(ctx, rt)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(ctx, rt) })
	tj := submit(t, trainJob("mpi", "mpi-quick", 2, 4))

	var remote remoteJobSet
	g.Eventually(func(g Gomega) {
		rs := remoteJobSetsOf(t, tj)
		g.Expect(rs).To(HaveLen(1))
		remote = rs[0]
	}, util.Timeout, util.Interval).Should(Succeed())
	name := remote.js.Name
	spoke := spokeNamed(remote.spoke)
	// The agent creates the companions after the JobSet (they are owned by
	// it), so they may not exist yet when the JobSet is first seen.
	g.Eventually(func(g Gomega) {
		var hostfile corev1.ConfigMap
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Namespace: remote.js.Namespace, Name: name + "-mpi-hostfile"}, &hostfile)).To(Succeed())
		g.Expect(hostfile.Data["hostfile"]).To(Equal(name + "-node-0-0." + name + " slots=4\n" + name + "-node-0-1." + name + " slots=4\n"))
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Namespace: remote.js.Namespace, Name: name + "-mpi-ssh-auth"}, &corev1.Secret{})).To(Succeed())
	}, util.Timeout, util.Interval).Should(Succeed())

	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(tj), tj)).To(Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete)).To(BeTrue(), "conditions %v", tj.Status.Conditions)
	}, util.Timeout, util.Interval).Should(Succeed())
}

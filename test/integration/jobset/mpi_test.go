package jobset

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// mpiDispatch is a Dispatch of an OpenMPI TrainJob: a launcher and two
// nodes of two processes each, all on kwok nodes for runFor.
func mpiDispatch(name, runFor string) *v1alpha1.Dispatch {
	rt := tytesting.MPIRuntimeSpec(1, 2)
	for i := range rt.Template.Spec.ReplicatedJobs {
		job := &rt.Template.Spec.ReplicatedJobs[i].Template
		job.Spec.BackoffLimit = ptr.To[int32](0)
		job.Spec.Template.Annotations = map[string]string{"kwok.trainyard.dev/run-for": runFor}
		job.Spec.Template.Spec.Tolerations = []corev1.Toleration{kube.KwokToleration}
	}
	tj := tytesting.MakeTrainJob("train-"+name, "team-a").Queue("lq").Suspend(true).NumNodes(2).GPUsPerNode(1).Obj()
	return tytesting.MakeDispatch(name, "trainyard-spoke", "spoke").
		SnapshotTrainJob(tj).SnapshotRuntime(v1alpha1.RuntimeKindClusterTrainingRuntime, "mpi", rt).
		PodSets(v1alpha1.PodSetPlacement{Name: "launcher", Count: 1}, v1alpha1.PodSetPlacement{Name: "node", Count: 2}).Obj()
}

// TestMPIJobRunsWithKeysAndHostfile: an MPI Dispatch runs as a launcher and
// two node pods with the SSH key Secret and hostfile ConfigMap Trainer's MPI
// plugin defines, owned by the JobSet; it runs to Succeeded, and Cancel
// leaves none of them behind.
func TestMPIJobRunsWithKeysAndHostfile(t *testing.T) {
	ctx, g := context.Background(), NewWithT(t)
	b := agentBackend()
	d := mpiDispatch("mpi", "4s")
	ref, err := b.Submit(ctx, d)
	g.Expect(err).NotTo(HaveOccurred())
	name := ref.Name

	var keys corev1.Secret
	g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Namespace: jobsNS, Name: name + "-mpi-ssh-auth"}, &keys)).To(Succeed())
	g.Expect(keys.Type).To(Equal(corev1.SecretTypeSSHAuth))
	g.Expect(string(keys.Data[corev1.SSHAuthPrivateKey])).To(HavePrefix("-----BEGIN EC PRIVATE KEY-----"))
	var hostfile corev1.ConfigMap
	g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Namespace: jobsNS, Name: name + "-mpi-hostfile"}, &hostfile)).To(Succeed())
	g.Expect(hostfile.Data["hostfile"]).To(Equal(name + "-node-0-0." + name + " slots=2\n" + name + "-node-0-1." + name + " slots=2\n"))
	expectOwnedByJobSet(g, name, &keys, &hostfile)

	g.Eventually(func(g Gomega) {
		pods := podsOf(g, name)
		g.Expect(pods).To(HaveLen(3), "a launcher and two nodes")
		for _, p := range pods {
			volumes := podVolumes(p)
			g.Expect(volumes).To(HaveKeyWithValue("mpi-ssh-auth", keys.Name))
			if strings.Contains(p.Name, "-launcher-") {
				g.Expect(volumes).To(HaveKeyWithValue("mpi-hostfile", hostfile.Name))
				g.Expect(envOf(p.Spec.Containers[0], "OMPI_MCA_orte_default_hostfile")).To(Equal("/etc/mpi/hostfile"))
			}
		}
	}, util.Timeout, util.Interval).Should(Succeed())

	// A Submit after a lost answer adopts everything and keeps the keys.
	expectSucceedsAndAdopts(g, b, d, ref)
	var kept corev1.Secret
	g.Expect(spoke.Client.Get(ctx, client.ObjectKeyFromObject(&keys), &kept)).To(Succeed())
	g.Expect(kept.Data).To(Equal(keys.Data))

	util.CancelUntilGone(g, b, d)
	// The garbage collector removes what the JobSet owned.
	expectGone(g, &keys, &hostfile)
	g.Expect(jobSetsOf(g, d)).To(BeEmpty())
}

package jobset

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// TestFluxJobRuns: Trainer's LAMMPS example on Trainer's Flux runtime, both
// as shipped, passes the JobSet webhook and runs its two pods, each with
// Flux's installer init container and the script ConfigMap and curve
// Secret, owned by the JobSet, mounted; it runs to Succeeded, a repeated
// Submit adopts it, and Cancel leaves nothing behind.
func TestFluxJobRuns(t *testing.T) {
	ctx, g := context.Background(), NewWithT(t)
	b := agentBackend()
	tj, err := tytesting.ShippedTrainJob(tytesting.TrainerFluxLammpsJob, "team-a")
	g.Expect(err).NotTo(HaveOccurred())
	tj.UID = "tj-uid-lammps"
	d := shippedDispatch(g, "flux", tytesting.TrainerFluxRuntime, tj, "3s", v1alpha1.PodSetPlacement{Name: "node", Count: 2})
	ref, err := b.Submit(ctx, d)
	g.Expect(err).NotTo(HaveOccurred())
	name := ref.Name

	scripts := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: jobsNS, Name: name + "-flux-entrypoint"}}
	curve := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: jobsNS, Name: name + "-flux-curve"}}
	expectOwnedByJobSet(g, name, scripts, curve)
	g.Expect(scripts.Data).To(HaveKey("init.sh"))
	g.Expect(scripts.Data).To(HaveKey("entrypoint.sh"))
	g.Expect(curve.Data).To(HaveKey("curve.cert"))

	g.Eventually(func(g Gomega) {
		pods := podsOf(g, name)
		g.Expect(pods).To(HaveLen(2))
		for _, p := range pods {
			g.Expect(p.Spec.InitContainers).To(HaveLen(1))
			g.Expect(p.Spec.InitContainers[0].Name).To(Equal("flux-installer"))
			g.Expect(p.Spec.Containers[0].Command).To(HaveExactElements("/bin/bash", "/etc/flux-config/entrypoint.sh", ContainSubstring("lmp")))
			g.Expect(podVolumes(p)).To(And(HaveKeyWithValue(scripts.Name, scripts.Name), HaveKeyWithValue("flux-curve", curve.Name)))
			// Flux's broker config names the pods by their JobSet hostnames.
			g.Expect(p.Spec.Hostname + "." + p.Spec.Subdomain).To(MatchRegexp("^" + name + `-node-0-[01]\.` + name + "$"))
		}
	}, util.Timeout, util.Interval).Should(Succeed())

	expectSucceedsAndAdopts(g, b, d, ref)

	util.CancelUntilGone(g, b, d)
	expectGone(g, scripts, curve)
	g.Expect(jobSetsOf(g, d)).To(BeEmpty())
}

package jobset

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetapi "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/backends/jobset"
	"github.com/trainyard-dev/trainyard/backends/kubework"
	"github.com/trainyard-dev/trainyard/test/util"
)

// TestForeignJobSetsStayOutOfTheCache: the agent's cache of a shared spoke
// holds only trainyard's JobSets. Another user's JobSet, even one with the
// very name a Dispatch wants, is not cached, yet the backend still sees it
// through the API server and refuses to adopt or report it.
func TestForeignJobSetsStayOutOfTheCache(t *testing.T) {
	ctx, g := context.Background(), NewWithT(t)
	b := agentBackend()
	ours := gpuDispatch("ours", map[string]string{"kwok.trainyard.dev/run-for": "1h"})
	ref, err := b.Submit(ctx, ours)
	g.Expect(err).NotTo(HaveOccurred())
	defer util.CancelUntilGone(g, b, ours)

	clash := gpuDispatch("clash", nil)
	ns := kubework.NamespaceOf(jobsPrefix, clash)
	g.Expect(spoke.EnsureNamespace(ctx, ns)).To(Succeed())
	foreign := suspendedJobSet(ns, backends.RemoteName(clash))
	g.Expect(spoke.Client.Create(ctx, foreign)).To(Succeed())
	t.Cleanup(func() { _ = spoke.Client.Delete(ctx, foreign) })

	names := func(g Gomega, c client.Reader) []string {
		var list jobsetapi.JobSetList
		g.Expect(c.List(ctx, &list)).To(Succeed())
		var out []string
		for _, js := range list.Items {
			out = append(out, js.Namespace+"/"+js.Name)
		}
		return out
	}
	g.Eventually(func(g Gomega) {
		g.Expect(names(g, spoke.Client)).To(ContainElements(ref.Namespace+"/"+ref.Name, ns+"/"+foreign.Name))
		g.Expect(names(g, cached)).To(ContainElement(ref.Namespace + "/" + ref.Name))
	}, util.Timeout, util.Interval).Should(Succeed())
	// The cache had time to see the foreign JobSet, created after ours.
	g.Consistently(func(g Gomega) {
		g.Expect(names(g, cached)).NotTo(ContainElement(ns + "/" + foreign.Name))
	}, "2s", util.Interval).Should(Succeed())

	_, err = b.Observe(ctx, clash)
	g.Expect(err).To(MatchError(jobset.ErrNotOwned))
	_, err = b.Submit(ctx, clash)
	g.Expect(err).To(MatchError(jobset.ErrNotOwned))
	work, err := b.ListRemote(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	for _, w := range work {
		g.Expect(w.Ref.Name).NotTo(Equal(foreign.Name))
	}
}

// suspendedJobSet is a user's own one-pod JobSet, suspended so that it
// takes no GPU from the suite's capacity checks.
func suspendedJobSet(ns, name string) *jobsetapi.JobSet {
	return &jobsetapi.JobSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: jobsetapi.JobSetSpec{
			Suspend: ptr.To(true),
			ReplicatedJobs: []jobsetapi.ReplicatedJob{{
				Name: "main", Replicas: 1,
				Template: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: "main", Image: "busybox"}},
				}}}},
			}},
		},
	}
}

package api

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/targets"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/spoke"
	"github.com/trainyard-dev/trainyard/test/util"
)

// TestAgentWatchesOnlyItsTarget: with the hub RBAC of hub/targets.AgentRBAC
// and nothing else, an agent's cache of its own Target (spoke.TargetCache)
// syncs and sees a spec change as it happens, while listing Targets, or
// watching another one, is forbidden.
func TestAgentWatchesOnlyItsTarget(t *testing.T) {
	ctx, g := context.Background(), NewWithT(t)
	mine := tytesting.MakeKubernetesTarget("watched", "gpu").Obj()
	other := tytesting.MakeKubernetesTarget("not-mine", "gpu").Obj()
	for _, tg := range []*v1alpha1.Target{mine, other} {
		g.Expect(k8sClient.Create(ctx, tg)).To(Succeed())
		t.Cleanup(func() { _ = k8sClient.Delete(ctx, tg) })
	}
	user := "trainyard-agent:" + mine.Name
	g.Expect(apiServer.EnsureNamespace(ctx, mine.Spec.Agent.Namespace)).To(Succeed())
	for _, o := range targets.AgentRBAC(mine, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user},
		rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "trainyard-hub"}) {
		g.Expect(client.IgnoreAlreadyExists(k8sClient.Create(ctx, o))).To(Succeed())
	}
	cfg, err := apiServer.AddUser(user)
	g.Expect(err).NotTo(HaveOccurred())

	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tc, err := spoke.TargetCache(cfg, cache.Options{Scheme: k8sClient.Scheme()}, mine.Name)
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = tc.Start(cctx) }()
	var seen v1alpha1.Target
	// Get starts the informer; RBAC must allow its list and watch.
	g.Eventually(func() error {
		gctx, gcancel := context.WithTimeout(ctx, 5*time.Second)
		defer gcancel()
		return tc.Get(gctx, client.ObjectKeyFromObject(mine), &seen)
	}, util.Timeout, util.Interval).Should(Succeed())

	g.Eventually(func() error {
		var tg v1alpha1.Target
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(mine), &tg); err != nil {
			return err
		}
		tg.Spec.Kubernetes.NetworkPolicy = &v1alpha1.TenantNetworkPolicy{Egress: []v1alpha1.EgressRule{{CIDR: "10.0.0.0/8"}}}
		return k8sClient.Update(ctx, &tg)
	}, util.Timeout, util.Interval).Should(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(tc.Get(ctx, client.ObjectKeyFromObject(mine), &seen)).To(Succeed())
		g.Expect(seen.Spec.Kubernetes.NetworkPolicy).NotTo(BeNil())
	}, util.Timeout, util.Interval).Should(Succeed(), "the agent's watch did not see the spec change")

	direct, err := client.New(cfg, client.Options{Scheme: k8sClient.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(apierrors.IsForbidden(direct.List(ctx, &v1alpha1.TargetList{}))).To(BeTrue(), "the agent may list every Target")
	g.Expect(apierrors.IsForbidden(direct.Get(ctx, client.ObjectKeyFromObject(other), &v1alpha1.Target{}))).To(BeTrue(),
		"the agent may read another Target")
}

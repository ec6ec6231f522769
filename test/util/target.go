package util

import (
	"context"

	"github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// TargetReason is the reason of the named Target's Available condition.
func TargetReason(g gomega.Gomega, c client.Client, name string) string {
	var t v1alpha1.Target
	g.Expect(c.Get(context.Background(), client.ObjectKey{Name: name}, &t)).To(gomega.Succeed())
	cond := apimeta.FindStatusCondition(t.Status.Conditions, v1alpha1.TargetAvailable)
	g.Expect(cond).NotTo(gomega.BeNil(), "target %s has no Available condition", name)
	return cond.Reason
}

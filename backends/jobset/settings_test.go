package jobset

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	"github.com/trainyard-dev/trainyard/backends/kubework"
)

// TestUpdateSettingsTakesEffectWithoutRestart: a Target change handed to a
// running backend decides its next Submit: a stricter Pod Security level
// refuses the next job, which the old level ran; a looser level and an egress allowance reach the namespace
// at the next job, and so does going back to the defaults.
func TestUpdateSettingsTakesEffectWithoutRestart(t *testing.T) {
	ctx, c := context.Background(), newFakeClient()
	b := New(c, Options{Namespace: testPrefix})
	if _, err := b.Submit(ctx, testDispatch("d1")); err != nil {
		t.Fatalf("Submit under the default policy: %v", err)
	}
	egress := func(t *testing.T) []networkingv1.NetworkPolicyEgressRule {
		t.Helper()
		var np networkingv1.NetworkPolicy
		if err := c.Get(ctx, client.ObjectKey{Namespace: testNS, Name: kubework.PolicyAllowEgress}, &np); err != nil {
			t.Fatalf("egress policy: %v", err)
		}
		return np.Spec.Egress
	}
	enforced := func(t *testing.T) string {
		t.Helper()
		var ns corev1.Namespace
		if err := c.Get(ctx, client.ObjectKey{Name: testNS}, &ns); err != nil {
			t.Fatal(err)
		}
		return ns.Labels["pod-security.kubernetes.io/enforce"]
	}
	if got := egress(t); len(got) != 0 {
		t.Errorf("egress allowed by default: %v", got)
	}

	store := []v1alpha1.EgressRule{{CIDR: "10.20.0.0/16", Ports: []v1alpha1.EgressPort{{Protocol: v1alpha1.EgressProtocolTCP, Port: 443}}}}
	b.UpdateSettings(kubework.Settings{Policy: kubework.PodPolicy{Level: v1alpha1.PodSecurityRestricted}, Egress: store})
	_, err := b.Submit(ctx, testDispatch("d2"))
	if !errors.Is(err, backends.ErrRejected) || !strings.Contains(err.Error(), "restricted") {
		t.Fatalf("Submit after the Target turned Restricted = %v, want rejected by Pod Security restricted", err)
	}
	if names := jobSetNames(t, c); len(names) != 1 {
		t.Errorf("jobsets = %v, want only the first", names)
	}

	b.UpdateSettings(kubework.Settings{Policy: kubework.PodPolicy{Level: v1alpha1.PodSecurityPrivileged}, Egress: store})
	if _, err := b.Submit(ctx, testDispatch("d3")); err != nil {
		t.Fatalf("Submit after the Target turned Privileged: %v", err)
	}
	if got := enforced(t); got != "privileged" {
		t.Errorf("namespace enforces %q, want privileged", got)
	}
	want := kubework.EgressPolicy(testNS, store).Spec.Egress
	if diff := cmp.Diff(want, egress(t)); diff != "" {
		t.Errorf("egress allowance after the Target change (-want +got):\n%s", diff)
	}

	b.UpdateSettings(kubework.Settings{})
	if _, err := b.Submit(ctx, testDispatch("d4")); err != nil {
		t.Fatalf("Submit after the Target went back to its defaults: %v", err)
	}
	if got := enforced(t); got != "baseline" {
		t.Errorf("namespace enforces %q, want baseline", got)
	}
	if got := egress(t); len(got) != 0 {
		t.Errorf("egress still allowed after the Target dropped it: %v", got)
	}
}

// TestStopWithinFollowsSettings: the stop bound the agent advertises is the
// grace cap in force and the margin, changed by UpdateSettings without a
// restart (kubework's TestLivePolicyConcurrent: with no race).
func TestStopWithinFollowsSettings(t *testing.T) {
	b := New(newFakeClient(), Options{Namespace: testPrefix})
	if got, want := b.StopWithin(), 30*time.Second+backends.StopMargin; got != want {
		t.Errorf("StopWithin by default = %v, want %v", got, want)
	}
	most := int64(600)
	b.UpdateSettings(kubework.Settings{Policy: kubework.PodPolicy{Allowed: v1alpha1.AllowedPodFields{MaxTerminationGracePeriodSeconds: &most}}})
	if got, want := b.StopWithin(), 600*time.Second+backends.StopMargin; got != want {
		t.Errorf("StopWithin with a 600 s cap = %v, want %v", got, want)
	}
}

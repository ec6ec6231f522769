package lws

import (
	"context"
	"testing"

	"github.com/kubeflow/trainer/v2/pkg/statusserver"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	lwsv1 "sigs.k8s.io/lws/api/leaderworkerset/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/jobset"
	"github.com/trainyard-dev/trainyard/backends/kubework"
	tyt "github.com/trainyard-dev/trainyard/internal/testing"
)

// statusOf is what a pod's KUBEFLOW_TRAINER_SERVER_URL is ("" when unset)
// and the audience of its projected token ("" when it has none).
func statusOf(spec corev1.PodSpec) (url, audience string) {
	for _, e := range spec.Containers[0].Env {
		if e.Name == kubework.EnvTrainerServerURL {
			url = e.Value
		}
	}
	for _, v := range spec.Volumes {
		if v.Name == kubework.TrainerStatusVolume && v.Projected != nil && v.Projected.Sources[0].ServiceAccountToken != nil {
			audience = v.Projected.Sources[0].ServiceAccountToken.Audience
		}
	}
	return url, audience
}

// TestSubmitGivesTrainerStatus: with the agent's status endpoint, Submit
// gives the leader's and the workers' pods Trainer's variables and a token
// of the hub TrainJob's audience (as the JobSet backend does), and the
// tenant namespace the CA ConfigMap and the egress exception; the hub's
// Render, shared with eligibility, carries none of it.
func TestSubmitGivesTrainerStatus(t *testing.T) {
	ep := kubework.StatusEndpoint{BaseURL: "https://trainyard-agent-status.trainyard-agent.svc:9443", CAConfigMap: "trainyard-status-ca"}
	access := &kubework.StatusAccess{Endpoint: ep, CA: []byte("-----BEGIN CERTIFICATE-----\n"), AgentNamespace: "trainyard-agent",
		AgentLabels: map[string]string{"app": "trainyard-agent"}, Port: 9443}
	// As Trainer's plugin: the pods of the trainer step only, which for
	// MPI is the launcher (the leader), not the nodes' sshd.
	cases := map[string]struct {
		d    *v1alpha1.Dispatch
		want map[string]bool
	}{
		"torch: the workers": {d: torchDispatch(2, tyt.TorchRuntimeSpec(1)).Obj(), want: map[string]bool{"worker": true}},
		"MPI: the launcher":  {d: tyt.MPIDispatch(2, 2, false).Obj(), want: map[string]bool{"leader": true, "worker": false}},
	}
	for name, tc := range cases {
		d := tc.d
		t.Run(name, func(t *testing.T) {
			ctx, c := context.Background(), newFakeClient()
			ref, err := New(c, Options{Namespace: testNS, Status: access}).Submit(ctx, d)
			if err != nil {
				t.Fatal(err)
			}
			var lws lwsv1.LeaderWorkerSet
			if err := c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &lws); err != nil {
				t.Fatal(err)
			}
			wantURL := ep.BaseURL + statusserver.StatusUrl(d.Spec.Workload.Namespace, d.Spec.TrainJob.Name)
			wantAudience := statusserver.TokenAudience(d.Spec.Workload.Namespace, d.Spec.TrainJob.Name)
			tmpl := lws.Spec.LeaderWorkerTemplate
			pods := map[string]corev1.PodSpec{"worker": tmpl.WorkerTemplate.Spec}
			if tmpl.LeaderTemplate != nil {
				pods["leader"] = tmpl.LeaderTemplate.Spec
			}
			if len(pods) != len(tc.want) {
				t.Fatalf("pod templates %d, want %d", len(pods), len(tc.want))
			}
			for role, spec := range pods {
				wantURL, wantAudience := wantURL, wantAudience
				if !tc.want[role] {
					wantURL, wantAudience = "", ""
				}
				if url, aud := statusOf(spec); url != wantURL || aud != wantAudience {
					t.Errorf("%s: URL %q audience %q, want %q and %q", role, url, aud, wantURL, wantAudience)
				}
			}
			var cm corev1.ConfigMap
			if err := c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ep.CAConfigMap}, &cm); err != nil || cm.Data["ca.crt"] != string(access.CA) {
				t.Errorf("CA ConfigMap in %s: %v %v", ref.Namespace, cm.Data, err)
			}
			var np networkingv1.NetworkPolicy
			if err := c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: kubework.PolicyAllowStatus}, &np); err != nil {
				t.Errorf("egress exception in %s: %v", ref.Namespace, err)
			}

			r, err := Render(d, jobset.RenderOptions{Namespace: testNS})
			if err != nil {
				t.Fatal(err)
			}
			if url, aud := statusOf(r.LWS.Spec.LeaderWorkerTemplate.WorkerTemplate.Spec); url != "" || aud != "" {
				t.Errorf("the hub's render carries the agent's endpoint: %q %q", url, aud)
			}
		})
	}
}

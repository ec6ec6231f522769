package charts

import (
	"strings"
	"testing"
)

// TestLint runs helm lint --strict on both charts with their defaults and
// with each toggle flipped.
func TestLint(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    release
	}{
		{"hub defaults", hubRelease()},
		{"hub serviceMonitor", hubRelease("--set", "metrics.serviceMonitor.enabled=true")},
		{"hub alerts and dashboard", hubRelease("--set", "metrics.prometheusRule.enabled=true", "--set", "metrics.grafanaDashboard.enabled=true")},
		{"hub own certificate", hubRelease("--set", "certManager.enabled=false", "--set", "webhook.certSecretName=c", "--set", "webhook.caBundle=Q0EK")},
		{"hub issuer", hubRelease("--set", "certManager.issuerRef.name=corp", "--set", "certManager.issuerRef.kind=ClusterIssuer")},
		{"hub no webhook", hubRelease("--set", "webhook.enabled=false", "--set", "certManager.enabled=false")},
		{"agent kubernetes", agentRelease()},
		{"agent leaderWorkerSet", agentRelease("--set", "kubernetes.leaderWorkerSet=true", "--set", "metrics.serviceMonitor.enabled=true")},
		{"agent slurm", slurmRelease()},
		{"agent slurm, credential on the hub", slurmRelease("--set", "slurm.credentialSecret=", "--set", "slurm.serviceUser=slurm")},
		{"agent slurm, output mounted for logs", slurmRelease("--set", "slurm.outputVolume.hostPath.path=/shared", "--set", "slurm.outputRoot=/shared")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"lint", "--strict", chartPath(tc.r.chart), "--namespace", releaseNS}, tc.r.values...)
			out, err := run(t, "helm", args...)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, "0 chart(s) failed") {
				t.Errorf("helm lint:\n%s", out)
			}
		})
	}
}

// TestBadValuesRejected: the values schema (or a required value) stops a
// bad release with a message naming the value.
func TestBadValuesRejected(t *testing.T) {
	const schema = "values don't meet the specifications of the schema"
	for _, tc := range []struct {
		name string
		r    release
		want []string
	}{
		{"hub unknown top-level value", hubRelease("--set", "replica=3"),
			[]string{schema, "additional properties 'replica' not allowed"}},
		{"hub unknown nested value", hubRelease("--set", "metrics.serviceMonitor.enable=true"),
			[]string{schema, "/metrics/serviceMonitor", "'enable' not allowed"}},
		{"hub bad duration", hubRelease("--set", "agentLease.grace=soon"),
			[]string{schema, "/agentLease/grace", "does not match pattern"}},
		{"hub bad port", hubRelease("--set", "probePort=70000"),
			[]string{schema, "/probePort", "maximum"}},
		{"hub no cert-manager and no secret", hubRelease("--set", "certManager.enabled=false"),
			[]string{schema, "/webhook/certSecretName", "/webhook/caBundle"}},
		{"hub issuer kind", hubRelease("--set", "certManager.issuerRef.name=x", "--set", "certManager.issuerRef.kind=Vault"),
			[]string{schema, "/certManager/issuerRef/kind", "'Issuer', 'ClusterIssuer'"}},
		{"agent unknown backend", agentRelease("--set", "backend=pbs"),
			[]string{schema, "/backend", "value must be one of 'kubernetes', 'slurm'"}},
		// The agent makes one namespace per tenant; a jobs namespace of old is refused.
		{"agent jobs namespace", agentRelease("--set", "kubernetes.jobsNamespace=jobs"),
			[]string{schema, "/kubernetes", "jobsNamespace"}},
		{"agent extra arg without dashes", agentRelease("--set", "extraArgs={verbose}"),
			[]string{schema, "/extraArgs/0"}},
		{"agent without target", release{chart: agentChart, name: "a", values: []string{"--set", "hub.kubeconfigSecret=k"}},
			[]string{"target (the name of the Target on the hub) is required"}},
		{"agent without hub kubeconfig", release{chart: agentChart, name: "a", values: []string{"--set", "target=spoke1"}},
			[]string{"hub.kubeconfigSecret (a Secret with the agent's hub kubeconfig) is required"}},
		{"slurm agent bad poll interval", slurmRelease("--set", "slurm.pollInterval=often"),
			[]string{schema, "/slurm/pollInterval"}},
		{"slurm agent status URL not https", slurmRelease("--set", "statusAPI.url=http://agent:9443"),
			[]string{schema, "/statusAPI/url", "does not match pattern"}},
		{"agent status Service type", agentRelease("--set", "statusAPI.service.type=ExternalName"),
			[]string{schema, "/statusAPI/service/type"}},
		{"hub stall threshold zero", hubRelease("--set", "metrics.prometheusRule.trainJobStalledMinutes=0"),
			[]string{schema, "/metrics/prometheusRule/trainJobStalledMinutes", "minimum"}},
		{"slurm agent relative credential path", slurmRelease("--set", "slurm.mountPath=etc/slurm"),
			[]string{schema, "/slurm/mountPath", "does not match pattern"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.r.template(t)
			if err == nil {
				t.Fatalf("helm template %v succeeded, want it refused", tc.r.values)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

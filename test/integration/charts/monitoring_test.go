package charts

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/trainyard-dev/trainyard/internal/metrics"
)

const (
	alertsFile    = "charts/trainyard-hub/files/alerts.yaml"
	dashboardFile = "charts/trainyard-hub/files/dashboard.json"
)

// TestAlertRules: promtool accepts the hub chart's alert rules, and its
// unit tests (testdata/alerts_test.yaml) fire and hold back each alert.
func TestAlertRules(t *testing.T) {
	if out, err := run(t, "promtool", "check", "rules", alertsFile); err != nil {
		t.Fatal(err)
	} else if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool check rules:\n%s", out)
	}
	out, err := run(t, "promtool", "test", "rules", "test/integration/charts/testdata/alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules:\n%s", out)
	}
	var rules struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	readYAML(t, alertsFile, &rules)
	var names []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			names = append(names, r.Alert)
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[a] == "" {
					t.Errorf("alert %s has no %s", r.Alert, a)
				}
			}
			if !strings.Contains(r.Annotations["runbook_url"], "docs/troubleshooting.md#") {
				t.Errorf("alert %s: runbook_url %q does not point into docs/troubleshooting.md", r.Alert, r.Annotations["runbook_url"])
			}
		}
	}
	sort.Strings(names)
	want := []string{"TrainyardDispatchErrorsRising", "TrainyardHeartbeatOld", "TrainyardJobsWaitingLong", "TrainyardTargetAwaitingAgent",
		"TrainyardTargetLost", "TrainyardTrainJobStalled"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("alerts (-want +got):\n%s", diff)
	}
}

// TestMonitoringToggles: the PrometheusRule and the dashboard ConfigMap
// render only when enabled, and carry the files unchanged.
func TestMonitoringToggles(t *testing.T) {
	off := hubRelease().render(t)
	if n := len(off.ofKind("PrometheusRule")); n != 0 {
		t.Errorf("defaults render %d PrometheusRules, want none", n)
	}
	for _, cm := range off.ofKind("ConfigMap") {
		if _, ok := cm.GetLabels()["grafana_dashboard"]; ok {
			t.Errorf("defaults render the dashboard ConfigMap %s", cm.GetName())
		}
	}

	on := hubRelease("--set", "metrics.prometheusRule.enabled=true", "--set", "metrics.prometheusRule.labels.release=kps",
		"--set", "metrics.grafanaDashboard.enabled=true", "--set", "metrics.grafanaDashboard.annotations.grafana_folder=ml").render(t)
	rule := on.one(t, "PrometheusRule")
	if rule.GetAPIVersion() != "monitoring.coreos.com/v1" || rule.GetNamespace() != releaseNS || rule.GetLabels()["release"] != "kps" {
		t.Errorf("PrometheusRule %s %s labels %v, want monitoring.coreos.com/v1 in %s with release=kps",
			rule.GetAPIVersion(), key(rule), rule.GetLabels(), releaseNS)
	}
	var file map[string]any
	b, err := os.ReadFile(filepath.Join(repoRoot(), alertsFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(file, rule.Object["spec"]); diff != "" {
		t.Errorf("PrometheusRule spec differs from %s (-file +rendered):\n%s", alertsFile, diff)
	}

	// The stall threshold is the value's, and only it differs from the file.
	stalled := hubRelease("--set", "metrics.prometheusRule.enabled=true",
		"--set", "metrics.prometheusRule.trainJobStalledMinutes=45").render(t).one(t, "PrometheusRule")
	b, err = yaml.Marshal(stalled.Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(string(mustYAML(t, file)), "> 60 * 30)", "> 60 * 45)", 1)
	if diff := cmp.Diff(want, string(b)); diff != "" || !strings.Contains(string(b), "trainyard_trainjob_progress_last_report_timestamp_seconds > 60 * 45)") {
		t.Errorf("trainJobStalledMinutes=45: the rule spec differs from %s with 45 minutes (-want +got):\n%s", alertsFile, diff)
	}

	cm := as[corev1.ConfigMap](t, on.named(t, "ConfigMap", "trainyard-hub-dashboard"))
	if cm.Labels["grafana_dashboard"] != "1" || cm.Annotations["grafana_folder"] != "ml" {
		t.Errorf("dashboard ConfigMap labels %v annotations %v, want grafana_dashboard=1 and grafana_folder=ml", cm.Labels, cm.Annotations)
	}
	dash, err := os.ReadFile(filepath.Join(repoRoot(), dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	if got := cm.Data["trainyard.json"]; got != strings.TrimRight(string(dash), "\n") {
		t.Errorf("the ConfigMap's trainyard.json differs from %s", dashboardFile)
	}
	if !json.Valid([]byte(cm.Data["trainyard.json"])) {
		t.Errorf("the rendered dashboard is not JSON")
	}
}

// metricName finds trainyard's metric names in PromQL.
var metricName = regexp.MustCompile(`\btrainyard_[a-z_]+\b`)

// TestMonitoringMetricsExist: every metric the dashboard and the alerts
// query is one internal/metrics registers, and every panel has a title and
// a query.
func TestMonitoringMetricsExist(t *testing.T) {
	known := registeredNames(t)
	var dash struct {
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	b, err := os.ReadFile(filepath.Join(repoRoot(), dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if p.Title == "" || len(p.Targets) == 0 {
			t.Errorf("panel %q has no title or no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	alerts, err := os.ReadFile(filepath.Join(repoRoot(), alertsFile))
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, e := range append(exprs, string(alerts)) {
		for _, m := range metricName.FindAllString(e, -1) {
			used[m] = true
		}
	}
	if len(used) < 10 {
		t.Fatalf("found only %d trainyard metrics in the dashboard and alerts: %v", len(used), used)
	}
	for m := range used {
		base := m
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if known[strings.TrimSuffix(m, suffix)] == "histogram" {
				base = strings.TrimSuffix(m, suffix)
			}
		}
		if known[base] == "" {
			t.Errorf("%s is queried but internal/metrics registers no such metric", m)
		}
	}
}

// registeredNames maps each metric metrics.Register registers to its type
// ("histogram" or "other"), from the collectors' descriptions.
func registeredNames(t *testing.T) map[string]string {
	t.Helper()
	rec := &recorder{}
	metrics.Register(rec)
	fq := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	names := map[string]string{}
	for _, c := range rec.collectors {
		kind := "other"
		if _, ok := c.(prometheus.ObserverVec); ok {
			kind = "histogram"
		}
		ch := make(chan *prometheus.Desc, 64)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			if m := fq.FindStringSubmatch(d.String()); m != nil {
				names[m[1]] = kind
			}
		}
	}
	if len(names) == 0 {
		t.Fatal("metrics.Register registered nothing")
	}
	return names
}

// recorder is a prometheus.Registerer that only keeps what it is given.
type recorder struct{ collectors []prometheus.Collector }

func (r *recorder) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	r.collectors = append(r.collectors, cs...)
}

func (r *recorder) Unregister(prometheus.Collector) bool { return false }

func mustYAML(t *testing.T, v any) []byte {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

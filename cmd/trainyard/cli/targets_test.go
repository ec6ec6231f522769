package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

var now = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

func ago(d time.Duration) metav1.Time { return metav1.Time{Time: now.Add(-d)} }

// lines joins table lines; tests spell tables out one line each.
func lines(l ...string) string { return strings.Join(l, "\n") + "\n" }

func testTargets() []v1alpha1.Target {
	spoke := tytesting.MakeKubernetesTarget("spoke-1", "h100").Available().Obj()
	spoke.CreationTimestamp = ago(2 * time.Hour)
	spoke.Status.LastHeartbeatTime = ptrTime(ago(5 * time.Second))
	spoke.Status.FreeGPUs = 12
	spoke.Status.Capacity = corev1.ResourceList{v1alpha1.GPUResource: resource.MustParse("16")}
	spoke.Status.Topology = &v1alpha1.TopologyStatus{
		Levels: []string{"topology.kubernetes.io/rack", "kubernetes.io/hostname"},
		Domains: []v1alpha1.TopologyDomain{
			{Values: []string{"rack-a"}, Nodes: []string{"n1", "n2"}, FreeGPUsPerNode: []int32{8, 4}},
			{Values: []string{"rack-b"}, Nodes: []string{"n3", "n4"}, FreeGPUsPerNode: []int32{0, 0}},
		},
	}
	hpc := tytesting.MakeSlurmTarget("hpc", "h100", "gpu").Flavors("h100", "a100").
		AvailableCondition(metav1.ConditionFalse, v1alpha1.ReasonHeartbeatStale).Paused().Obj()
	hpc.CreationTimestamp = ago(3 * 24 * time.Hour)
	hpc.Status.LastHeartbeatTime = ptrTime(ago(10 * time.Minute))
	hpc.Status.FreeGPUs = 0
	hpc.Status.Capacity = corev1.ResourceList{v1alpha1.GPUResource: resource.MustParse("16")}
	fresh := tytesting.MakeKubernetesTarget("new", "h100").Obj()
	fresh.CreationTimestamp = ago(30 * time.Second)
	return []v1alpha1.Target{*hpc, *fresh, *spoke}
}

func ptrTime(t metav1.Time) *metav1.Time { return &t }

func TestPrintTargets(t *testing.T) {
	cases := map[string]struct {
		format  string
		targets []v1alpha1.Target
		single  bool
		want    string
	}{
		"table": {
			targets: testTargets(),
			want: lines(
				"NAME      TYPE         AVAILABLE                HEARTBEAT   FREE-GPUS   AGE",
				"hpc       Slurm        False (HeartbeatStale)   10m ago     0/16        3d",
				"new       Kubernetes   Unknown                  <never>     <none>      30s",
				"spoke-1   Kubernetes   True (HeartbeatFresh)    5s ago      12/16       120m",
			),
		},
		"wide shows flavors, pause and free GPUs per domain": {
			format:  outputWide,
			targets: testTargets(),
			want: lines(
				"NAME      TYPE         AVAILABLE                HEARTBEAT   FREE-GPUS   AGE       FLAVORS     PAUSED    FREE-GPUS-PER-DOMAIN",
				"hpc       Slurm        False (HeartbeatStale)   10m ago     0/16        3d        h100,a100   true      <none>",
				"new       Kubernetes   Unknown                  <never>     <none>      30s       h100        false     <none>",
				"spoke-1   Kubernetes   True (HeartbeatFresh)    5s ago      12/16       120m      h100        false     rack-a=8,4 rack-b=0,0",
			),
		},
		"name": {
			format:  outputName,
			targets: testTargets()[:2],
			want:    lines("target.trainyard.dev/hpc", "target.trainyard.dev/new"),
		},
		"no targets": {
			targets: nil,
			want:    lines("No targets found."),
		},
		"yaml of one named target is the object": {
			format:  outputYAML,
			targets: testTargets()[1:2],
			single:  true,
			want: lines(
				"apiVersion: trainyard.dev/v1alpha1",
				"kind: Target",
				"metadata:",
				"  creationTimestamp: \"2026-12-02T09:59:30Z\"",
				"  name: new",
				"spec:",
				"  agent:",
				"    namespace: trainyard-new",
				"  flavors:",
				"  - h100",
				"  kubernetes: {}",
				"  type: Kubernetes",
				"status: {}",
			),
		},
		"json of several targets is a List": {
			format:  outputJSON,
			targets: []v1alpha1.Target{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}},
			want: lines(
				"{",
				`    "apiVersion": "v1",`,
				`    "kind": "List",`,
				`    "items": [`,
				`        {`,
				`            "kind": "Target",`,
				`            "apiVersion": "trainyard.dev/v1alpha1",`,
				`            "metadata": {`,
				`                "name": "a"`,
				`            },`,
				`            "spec": {`,
				`                "type": "",`,
				`                "flavors": null,`,
				`                "agent": {`,
				`                    "namespace": ""`,
				`                }`,
				`            },`,
				`            "status": {}`,
				`        }`,
				`    ]`,
				"}",
			),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			if err := printTargets(&out, tc.format, tc.targets, tc.single, now); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, out.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDomainsAreBounded(t *testing.T) {
	tg := v1alpha1.Target{Status: v1alpha1.TargetStatus{Topology: &v1alpha1.TopologyStatus{Levels: []string{"rack", "host"}}}}
	for range maxDomainsShown + 3 {
		tg.Status.Topology.Domains = append(tg.Status.Topology.Domains, v1alpha1.TopologyDomain{Values: []string{"r"}, FreeGPUsPerNode: []int32{1}})
	}
	got := domains(&tg)
	if want := strings.Repeat("r=1 ", maxDomainsShown) + "(+3 more)"; got != want {
		t.Errorf("domains = %q, want %q", got, want)
	}
}

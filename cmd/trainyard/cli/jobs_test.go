package cli

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/hubview"
)

func testJobs() []hubview.JobSummary {
	return []hubview.JobSummary{
		{Namespace: "team-a", Name: "llama", Queue: "lq", Workload: "trainjob-llama", Target: "spoke-1", Attempt: 2, Phase: "Running",
			Remote: &v1alpha1.RemoteRef{Kind: "JobSet", Namespace: "trainyard-jobs", Name: "ty-llama-2"}, Created: ago(90 * time.Minute),
			Progress: &hubview.ProgressSummary{Percent: ptr.To[int32](42), RemainingSeconds: ptr.To[int32](3600), Reported: ago(30 * time.Second)}},
		{Namespace: "team-a", Name: "mnist", Queue: "lq", Phase: hubview.StatePending, Created: ago(40 * time.Second)},
		{Namespace: "team-b", Name: "sim", Queue: "hpc", Workload: "trainjob-sim", Target: "hpc", Attempt: 1, Phase: "Failed",
			Remote: &v1alpha1.RemoteRef{Kind: "SlurmJob", Name: "ty-sim-1", ID: "42"}, Created: ago(26 * time.Hour),
			Progress: &hubview.ProgressSummary{Percent: ptr.To[int32](80), RemainingSeconds: ptr.To[int32](600), Reported: ago(25 * time.Hour)}},
	}
}

func TestPrintJobs(t *testing.T) {
	cases := map[string]struct {
		format string
		jobs   []hubview.JobSummary
		scope  printScope
		want   string
	}{
		"table in one namespace": {
			jobs:  testJobs()[:2],
			scope: printScope{namespace: "team-a"},
			want: lines(
				"NAME      QUEUE     TARGET    PHASE     PROGRESS   ETA       AGE",
				"llama     lq        spoke-1   Running   42%        59m       90m",
				"mnist     lq        <none>    Pending   -          -         40s",
			),
		},
		"all namespaces, wide": {
			format: outputWide,
			jobs:   testJobs(),
			scope:  printScope{all: true},
			want: lines(
				"NAMESPACE   NAME      QUEUE     TARGET    PHASE     PROGRESS   ETA       AGE       ATTEMPT   REMOTE",
				"team-a      llama     lq        spoke-1   Running   42%        59m       90m       2         JobSet trainyard-jobs/ty-llama-2",
				"team-a      mnist     lq        <none>    Pending   -          -         40s       <none>    <none>",
				"team-b      sim       hpc       hpc       Failed    80%        -         26h       1         SlurmJob ty-sim-1 (id 42)",
			),
		},
		"name": {
			format: outputName,
			jobs:   testJobs()[:2],
			want:   lines("trainjob.trainer.kubeflow.org/llama", "trainjob.trainer.kubeflow.org/mnist"),
		},
		"none in the namespace": {
			scope: printScope{namespace: "team-c"},
			want:  lines("No TrainJobs found in team-c namespace."),
		},
		"none anywhere": {
			scope: printScope{all: true},
			want:  lines("No TrainJobs found."),
		},
		"yaml of one named job is its summary": {
			format: outputYAML,
			jobs:   testJobs()[2:],
			scope:  printScope{single: true},
			want: lines(
				"attempt: 1",
				`created: "2026-12-01T08:00:00Z"`,
				"name: sim",
				"namespace: team-b",
				"phase: Failed",
				"progress:",
				"  percent: 80",
				`  remainingSeconds: 600`,
				`  reported: "2026-12-01T09:00:00Z"`,
				"queue: hpc",
				"remote:",
				`  id: "42"`,
				"  kind: SlurmJob",
				"  name: ty-sim-1",
				"target: hpc",
				"workload: trainjob-sim",
			),
		},
		"json of several jobs is a List": {
			format: outputJSON,
			jobs:   testJobs()[1:2],
			want: lines(
				"{",
				`    "apiVersion": "v1",`,
				`    "kind": "List",`,
				`    "items": [`,
				`        {`,
				`            "namespace": "team-a",`,
				`            "name": "mnist",`,
				`            "queue": "lq",`,
				`            "phase": "Pending",`,
				`            "created": "2026-12-02T09:59:20Z"`,
				`        }`,
				`    ]`,
				"}",
			),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			if err := printJobs(&out, tc.format, tc.jobs, tc.scope, now); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, out.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
}

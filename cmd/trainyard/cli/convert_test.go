package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// noKubeconfig is a kubeconfig that does not exist: no hub is reachable.
const noKubeconfig = "/nonexistent/kubeconfig"

// TestConvertCommand runs `convert` as a user does: documents from stdin,
// TrainJobs on stdout, warnings and errors on stderr, and the exit code.
func TestConvertCommand(t *testing.T) {
	cases := map[string]struct {
		args       []string
		stdin      string
		wantCode   int
		wantOut    string
		wantErrOut string
	}{
		"two documents, YAML": {
			args:     []string{"convert", "-f", "-", "--runtime", "rt"},
			stdin:    "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: a, labels: {kueue.x-k8s.io/queue-name: q}}\nspec: {nprocPerNode: 2, pytorchReplicaSpecs: {Worker: {replicas: 2, template: {spec: {containers: [{name: pytorch, image: i}]}}}}}\n---\n---\napiVersion: kubeflow.org/v1\nkind: MPIJob\nmetadata: {name: b, labels: {kueue.x-k8s.io/queue-name: q}}\nspec: {mpiReplicaSpecs: {Worker: {template: {spec: {containers: [{name: mpi, image: i}]}}}}}\n",
			wantCode: 0,
			wantOut: lines(
				"apiVersion: trainer.kubeflow.org/v1alpha1",
				"kind: TrainJob",
				"metadata:",
				"  labels:",
				"    kueue.x-k8s.io/queue-name: q",
				"  name: a",
				"spec:",
				"  runtimeRef:",
				"    apiGroup: trainer.kubeflow.org",
				"    kind: ClusterTrainingRuntime",
				"    name: rt",
				"  trainer:",
				"    image: i",
				"    numNodes: 2",
				"    numProcPerNode: 2",
				"---",
				"apiVersion: trainer.kubeflow.org/v1alpha1",
				"kind: TrainJob",
				"metadata:",
				"  labels:",
				"    kueue.x-k8s.io/queue-name: q",
				"  name: b",
				"spec:",
				"  runtimeRef:",
				"    apiGroup: trainer.kubeflow.org",
				"    kind: ClusterTrainingRuntime",
				"    name: rt",
				"  trainer:",
				"    image: i",
				"    numNodes: 1",
			),
		},
		"JSON, with a warning": {
			args:     []string{"convert", "-f", "-", "-o", "json", "--runtime", "torch-distributed", "--kubeconfig", noKubeconfig},
			stdin:    "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: a}\nspec: {pytorchReplicaSpecs: {Worker: {template: {spec: {containers: [{name: pytorch, image: i}]}}}}}\n",
			wantCode: 0,
			wantOut: lines(
				"{",
				`    "apiVersion": "trainer.kubeflow.org/v1alpha1",`,
				`    "kind": "TrainJob",`,
				`    "metadata": {`,
				`        "name": "a"`,
				`    },`,
				`    "spec": {`,
				`        "runtimeRef": {`,
				`            "apiGroup": "trainer.kubeflow.org",`,
				`            "kind": "ClusterTrainingRuntime",`,
				`            "name": "torch-distributed"`,
				`        },`,
				`        "trainer": {`,
				`            "image": "i",`,
				`            "numNodes": 1`,
				`        }`,
				`    }`,
				"}",
			),
			wantErrOut: lines("warning: PyTorchJob/a: no kueue.x-k8s.io/queue-name label (pass --queue): Kueue will not queue the TrainJob, so trainyard will not dispatch it"),
		},
		"queue and namespace from flags, offline": {
			args:     []string{"convert", "-f", "-", "--runtime", "rt", "--queue", "q2", "-n", "team-b", "--kubeconfig", noKubeconfig},
			stdin:    "apiVersion: kubeflow.org/v2beta1\nkind: MPIJob\nmetadata: {name: a, namespace: team-a, labels: {kueue.x-k8s.io/queue-name: q}}\nspec: {mpiReplicaSpecs: {Worker: {replicas: 2, template: {spec: {containers: [{name: mpi, image: i}]}}}}}\n",
			wantCode: 0,
			wantOut: lines(
				"apiVersion: trainer.kubeflow.org/v1alpha1",
				"kind: TrainJob",
				"metadata:",
				"  labels:",
				"    kueue.x-k8s.io/queue-name: q2",
				"  name: a",
				"  namespace: team-b",
				"spec:",
				"  runtimeRef:",
				"    apiGroup: trainer.kubeflow.org",
				"    kind: ClusterTrainingRuntime",
				"    name: rt",
				"  trainer:",
				"    image: i",
				"    numNodes: 2",
			),
		},
		"no runtime, and no hub to pick one from": {
			args:       []string{"convert", "-f", "-", "--kubeconfig", noKubeconfig},
			stdin:      "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: a}\nspec: {pytorchReplicaSpecs: {Worker: {template: {spec: {containers: [{name: pytorch, image: i}]}}}}}\n",
			wantCode:   1,
			wantErrOut: lines("error: -: document 1: PyTorchJob/a: no --runtime, and the hub's runtimes cannot be listed: load kubeconfig: stat " + noKubeconfig + ": no such file or directory (pass --runtime NAME to convert without the hub)"),
		},
		"a kind it cannot convert": {
			args:       []string{"convert", "-f", "-"},
			stdin:      "apiVersion: batch/v1\nkind: Job\nmetadata: {name: a}\n",
			wantCode:   1,
			wantErrOut: lines("error: -: document 1: cannot convert batch/v1 Job: want a kubeflow.org/v1 PyTorchJob, or a kubeflow.org/v1 or kubeflow.org/v2beta1 MPIJob"),
		},
		"a missing file": {
			args:       []string{"convert", "-f", "/nonexistent/job.yaml"},
			wantCode:   1,
			wantErrOut: lines("error: open /nonexistent/job.yaml: no such file or directory"),
		},
		"no file": {
			args:       []string{"convert"},
			wantCode:   1,
			wantErrOut: lines(`error: required flag(s) "filename" not set`),
		},
		"a bad runtime kind": {
			args:       []string{"convert", "-f", "-", "--runtime-kind", "Runtime"},
			wantCode:   1,
			wantErrOut: lines(`error: --runtime-kind must be ClusterTrainingRuntime or TrainingRuntime, not "Runtime"`),
		},
		"an output it does not print": {
			args:       []string{"convert", "-f", "-", "-o", "wide"},
			wantCode:   1,
			wantErrOut: lines(`error: unable to match a printer suitable for the output format "wide", allowed formats are: yaml,json`),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			root := NewRootCommand(Options{Streams: Streams{In: strings.NewReader(tc.stdin), Out: &out, ErrOut: &errOut}})
			code := Execute(context.Background(), root, tc.args)
			if code != tc.wantCode {
				t.Errorf("exit code = %d, want %d", code, tc.wantCode)
			}
			if diff := cmp.Diff(tc.wantOut, out.String()); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantErrOut, errOut.String()); diff != "" {
				t.Errorf("stderr (-want +got):\n%s", diff)
			}
		})
	}
}

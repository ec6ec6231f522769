package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/trainyard-dev/trainyard/cmd/trainyard/cli"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/hubview"
)

// result is what one CLI run printed and returned.
type result struct {
	out, errOut string
	code        int
}

// runCLI executes the CLI in-process as `kubectl trainyard args...` against the
// test's API server (through --kubeconfig unless noKubeconfig).
func runCLI(t *testing.T, noKubeconfig bool, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	root := cli.NewRootCommand(cli.Options{
		Name: "kubectl trainyard", Streams: cli.Streams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut},
	})
	if !noKubeconfig {
		args = append(args, "--kubeconfig", hub.Kubeconfig)
	}
	code := cli.Execute(context.Background(), root, args)
	return result{out: out.String(), errOut: errOut.String(), code: code}
}

var cellSep = regexp.MustCompile(`\s{2,}`)

// rows splits a table into cells (kubectl pads cells with 3 or more spaces).
func rows(table string) [][]string {
	var out [][]string
	for _, l := range strings.Split(strings.TrimRight(table, "\n"), "\n") {
		out = append(out, cellSep.Split(strings.TrimRight(l, " "), -1))
	}
	return out
}

// wildcard is a cell whose value (an age) the test does not pin.
const wildcard = "*"

func matchRows(want, got [][]string) string {
	got = append([][]string(nil), got...)
	for i := range got {
		if i < len(want) && len(got[i]) == len(want[i]) {
			got[i] = append([]string(nil), got[i]...)
			for j := range got[i] {
				if want[i][j] == wildcard {
					got[i][j] = wildcard
				}
			}
		}
	}
	return cmp.Diff(want, got)
}

// tableCase runs a command that prints a table.
type tableCase struct {
	args         []string
	noKubeconfig bool
	want         [][]string
}

func runTables(t *testing.T, cases map[string]tableCase) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := runCLI(t, tc.noKubeconfig, tc.args...)
			if r.code != 0 || r.errOut != "" {
				t.Fatalf("exit code %d, stderr:\n%s", r.code, r.errOut)
			}
			if diff := matchRows(tc.want, rows(r.out)); diff != "" {
				t.Errorf("table (-want +got):\n%s\noutput:\n%s", diff, r.out)
			}
		})
	}
}

// errorCase runs a command that must fail.
type errorCase struct {
	args       []string
	wantErrOut string
}

func runErrors(t *testing.T, cases map[string]errorCase) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := runCLI(t, false, tc.args...)
			if r.code != 1 {
				t.Errorf("exit code = %d, want 1", r.code)
			}
			if r.out != "" {
				t.Errorf("stdout = %q, want nothing", r.out)
			}
			if !strings.HasPrefix(r.errOut, tc.wantErrOut) {
				t.Errorf("stderr = %q, want it to start with %q", r.errOut, tc.wantErrOut)
			}
		})
	}
}

func TestTargets(t *testing.T) {
	t.Setenv("KUBECONFIG", hub.Kubeconfig)
	runTables(t, map[string]tableCase{
		"table": {
			args: []string{"targets"},
			want: [][]string{
				{"NAME", "TYPE", "AVAILABLE", "HEARTBEAT", "FREE-GPUS", "AGE"},
				{"hpc", "Slurm", "False (HeartbeatStale)", wildcard, "0/16", wildcard},
				{"spoke-1", "Kubernetes", "True (HeartbeatFresh)", wildcard, "12/16", wildcard},
			},
		},
		"wide": {
			args: []string{"targets", "-o", "wide"},
			want: [][]string{
				{"NAME", "TYPE", "AVAILABLE", "HEARTBEAT", "FREE-GPUS", "AGE", "FLAVORS", "PAUSED", "FREE-GPUS-PER-DOMAIN"},
				{"hpc", "Slurm", "False (HeartbeatStale)", wildcard, "0/16", wildcard, "h100", "false", "<none>"},
				{"spoke-1", "Kubernetes", "True (HeartbeatFresh)", wildcard, "12/16", wildcard, "h100", "false", "rack-a=8,4 rack-b=0,0"},
			},
		},
		"-n is ignored for cluster-scoped targets": {
			args: []string{"targets", "hpc", "-n", "team-a"},
			want: [][]string{
				{"NAME", "TYPE", "AVAILABLE", "HEARTBEAT", "FREE-GPUS", "AGE"},
				{"hpc", "Slurm", "False (HeartbeatStale)", wildcard, "0/16", wildcard},
			},
		},
		"one by name, kubeconfig from KUBECONFIG": {
			args:         []string{"targets", "spoke-1"},
			noKubeconfig: true,
			want: [][]string{
				{"NAME", "TYPE", "AVAILABLE", "HEARTBEAT", "FREE-GPUS", "AGE"},
				{"spoke-1", "Kubernetes", "True (HeartbeatFresh)", wildcard, "12/16", wildcard},
			},
		},
	})
}

func TestTargetsStructured(t *testing.T) {
	r := runCLI(t, false, "targets", "-o", "name")
	if r.code != 0 || r.out != "target.trainyard.dev/hpc\ntarget.trainyard.dev/spoke-1\n" {
		t.Errorf("-o name: code %d, stdout %q, stderr %q", r.code, r.out, r.errOut)
	}
	r = runCLI(t, false, "targets", "-o", "json")
	var l struct {
		Kind  string `json:"kind"`
		Items []struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Status struct {
				FreeGPUs int64 `json:"freeGPUs"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(r.out), &l); err != nil || r.code != 0 {
		t.Fatalf("-o json: code %d, %v:\n%s", r.code, err, r.out)
	}
	if l.Kind != "List" || len(l.Items) != 2 || l.Items[1].Kind != "Target" || l.Items[1].Metadata.Name != "spoke-1" || l.Items[1].Status.FreeGPUs != 12 {
		t.Errorf("-o json = %+v", l)
	}
}

func TestJobs(t *testing.T) {
	runTables(t, map[string]tableCase{
		"one namespace": {
			args: []string{"jobs", "-n", "team-a"},
			want: [][]string{
				{"NAME", "QUEUE", "TARGET", "PHASE", "PROGRESS", "ETA", "AGE"},
				{"llama", "lq", "spoke-1", "Running", "42%", wildcard, wildcard},
				{"mnist", "lq", "<none>", "Pending", "-", "-", wildcard},
			},
		},
		"all namespaces, wide": {
			args: []string{"jobs", "-A", "-o", "wide"},
			want: [][]string{
				{"NAMESPACE", "NAME", "QUEUE", "TARGET", "PHASE", "PROGRESS", "ETA", "AGE", "ATTEMPT", "REMOTE"},
				{"team-a", "llama", "lq", "spoke-1", "Running", "42%", wildcard, wildcard, "2", "JobSet trainyard-jobs/ty-llama-2"},
				{"team-a", "mnist", "lq", "<none>", "Pending", "-", "-", wildcard, "<none>", "<none>"},
				{"team-b", "sim", "hpc-lq", "hpc", "Failed", "-", "-", wildcard, "1", "SlurmJob ty-sim-1 (id 42)"},
			},
		},
		"the context's namespace when -n is not given": {
			args: []string{"jobs"},
			want: [][]string{{"No TrainJobs found in default namespace."}},
		},
	})
}

func TestJobsStructured(t *testing.T) {
	r := runCLI(t, false, "jobs", "sim", "-n", "team-b", "-o", "yaml")
	var got hubview.JobSummary
	if err := yaml.Unmarshal([]byte(r.out), &got); err != nil || r.code != 0 {
		t.Fatalf("-o yaml: code %d, %v:\n%s", r.code, err, r.out)
	}
	if got.Target != "hpc" || got.Phase != "Failed" || got.Attempt != 1 || got.Remote == nil || got.Remote.ID != "42" || got.Workload != "trainjob-sim-1a2b3" {
		t.Errorf("-o yaml = %+v", got)
	}
	r = runCLI(t, false, "jobs", "-n", "team-a", "-o", "name")
	if r.code != 0 || r.out != "trainjob.trainer.kubeflow.org/llama\ntrainjob.trainer.kubeflow.org/mnist\n" {
		t.Errorf("-o name: code %d, stdout %q, stderr %q", r.code, r.out, r.errOut)
	}
}

// squash collapses table padding so tests can look for whole lines.
func squash(s string) string {
	return regexp.MustCompile(`[ \t]+`).ReplaceAllString(s, " ")
}

func TestDescribe(t *testing.T) {
	cases := map[string]struct {
		args []string
		want []string
	}{
		"running job with an old attempt being deleted": {
			args: []string{"describe", "llama", "-n", "team-a"},
			want: []string{
				"\nName: llama\n",
				"\nPhase: Running\n",
				"\n Running True RemoteRunning ",
				"\nWorkload: trainjob-llama-1a2b3\n",
				"\n Cluster Queue: cq-team-a\n",
				"\n node 2 nvidia.com/gpu=h100\n",
				"\n gpu-dispatch (trainyard) Ready ",
				" running on target spoke-1 (attempt 2) as JobSet trainyard-jobs/ty-llama-2\n",
				"\n Target: spoke-1\n Attempt: 2\n Dispatch: trainyard-spoke-1/llama-2\n Phase: Running (RemoteRunning)\n",
				"\n Remote: JobSet trainyard-jobs/ty-llama-2\n Exit Code: <none>\n",
				"\nProgress: 42%, ETA ", "\n loss 0.31\n eval_accuracy 0.87\n",
				fmt.Sprintf("\n History: %d points from ", llamaHistoryPoints),
				"\n Runtime Snapshot:\n Kind: ClusterTrainingRuntime\n Name: torch-distributed\n Hash: sha256:",
				"\n node 2 nvidia.com/gpu=h100 topology.kubernetes.io/rack: rack-a=2\n",
				"\n 1 hpc <none> trainyard-hpc/llama-1 deleting\n",
				"\n 2 spoke-1 Running trainyard-spoke-1/llama-2 live\n",
				" Normal Dispatched ", " trainyard-hub Workload/trainjob-llama-1a2b3 attempt 2 to target spoke-1\n",
				" Warning Requeued ", " trainyard-hub TrainJob/llama target hpc lost: no heartbeat\n",
			},
		},
		"failed Slurm job": {
			args: []string{"describe", "sim", "-n", "team-b"},
			want: []string{
				"\nPhase: Failed\n",
				"\n Failed True RemoteFailed ",
				"\n Phase: Failed (RemoteFailed)\n Message: Slurm job 42 exited with 3\n Remote: SlurmJob ty-sim-1 (id 42)\n Exit Code: 3\n",
				"\n node 2 nvidia.com/gpu=h100 anywhere on the target\n",
				"\nEvents: <none>\n",
			},
		},
		"queued job without a workload": {
			args: []string{"describe", "mnist", "-n", "team-a"},
			want: []string{
				"\nPhase: Pending\n",
				"\nWorkload: <none> (Kueue has not made one",
				"\nPlacement: <none> (no live Dispatch)\n",
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := runCLI(t, false, tc.args...)
			if r.code != 0 || r.errOut != "" {
				t.Fatalf("exit code %d, stderr:\n%s", r.code, r.errOut)
			}
			out := "\n" + squash(r.out)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, r.out)
				}
			}
		})
	}
}

func TestDescribeStructured(t *testing.T) {
	r := runCLI(t, false, "describe", "llama", "-n", "team-a", "-o", "json")
	var d hubview.Description
	if err := json.Unmarshal([]byte(r.out), &d); err != nil || r.code != 0 {
		t.Fatalf("-o json: code %d, %v:\n%s", r.code, err, r.out)
	}
	if d.Placement == nil || d.Placement.Target != "spoke-1" || d.Placement.Attempt != 2 || len(d.Attempts) != 2 || len(d.Events) != 2 {
		t.Errorf("-o json = %+v", d)
	}
	if d.Workload == nil || len(d.Workload.Checks) != 1 || !d.Workload.Checks[0].Trainyard {
		t.Errorf("-o json workload = %+v", d.Workload)
	}
}

func TestErrors(t *testing.T) {
	runErrors(t, map[string]errorCase{
		"describe a job that does not exist": {
			args:       []string{"describe", "missing", "-n", "team-a"},
			wantErrOut: "error: trainjobs.trainer.kubeflow.org \"missing\" not found in namespace \"team-a\"\n",
		},
		"jobs names a job that does not exist": {
			args:       []string{"jobs", "missing", "-n", "team-b"},
			wantErrOut: "error: trainjobs.trainer.kubeflow.org \"missing\" not found in namespace \"team-b\"\n",
		},
		"a target that does not exist": {
			args:       []string{"targets", "nope"},
			wantErrOut: "error: targets.trainyard.dev \"nope\" not found\n",
		},
		"describe without a job": {
			args:       []string{"describe", "-n", "team-a"},
			wantErrOut: "error: accepts 1 arg(s), received 0\n",
		},
		"an output format the command does not print": {
			args:       []string{"jobs", "-o", "table"},
			wantErrOut: "error: unable to match a printer suitable for the output format \"table\"",
		},
		"a context the kubeconfig lacks": {
			args:       []string{"targets", "--context", "nope"},
			wantErrOut: "error: load kubeconfig: context \"nope\" does not exist\n",
		},
		"logs of a job that does not exist": {
			args:       []string{"logs", "missing", "-n", "team-a"},
			wantErrOut: "error: trainjobs.trainer.kubeflow.org \"missing\" not found in namespace \"team-a\"\n",
		},
		"logs when no agent answers": {
			args:       []string{"logs", "llama", "-n", "team-a", "--request-timeout", "1s"},
			wantErrOut: "error: the agent of target spoke-1 did not answer within 1s; is it running? (see 'kubectl trainyard targets')\n",
		},
		"logs with a negative tail": {
			args:       []string{"logs", "llama", "-n", "team-a", "--tail", "-2"},
			wantErrOut: "error: --tail must be -1 or more",
		},
		"an unknown flag": {
			args:       []string{"jobs", "--bogus"},
			wantErrOut: "error: unknown flag: --bogus\nSee 'kubectl trainyard jobs --help' for usage\n",
		},
	})
}

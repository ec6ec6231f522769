// Package slurm_test submits real jobs to the sandbox's Slurm cluster (cmd/trainyard/sandbox/slurm)
// through slurmrestd, with the SlinkyProject generated clients, as alice with a JWT:
// the same path trainyard's Slurm backend takes.
package slurm_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v0041 "github.com/SlinkyProject/slurm-client/api/v0041"
	v0042 "github.com/SlinkyProject/slurm-client/api/v0042"
)

const tenant = "alice"

// outDir is alice's directory for job output, inside the chroot.
const outDir = "/home/alice/trainyard-it"

// authHeaders is slurmrestd's rest_auth/jwt scheme: user name plus token per request.
func authHeaders(_ context.Context, req *http.Request) error {
	req.Header.Set("X-SLURM-USER-NAME", tenant)
	req.Header.Set("X-SLURM-USER-TOKEN", aliceToken)
	return nil
}

func client42(t *testing.T) *v0042.ClientWithResponses {
	t.Helper()
	c, err := v0042.NewClientWithResponses(cluster.URL, v0042.WithRequestEditorFn(authHeaders))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func client41(t *testing.T) *v0041.ClientWithResponses {
	t.Helper()
	c, err := v0041.NewClientWithResponses(cluster.URL, v0041.WithRequestEditorFn(authHeaders))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ptr[T any](v T) *T { return &v }

// nodeSummary is what both API versions must agree on about a node.
type nodeSummary struct {
	name, gres string
	partitions []string
	states     []string
}

// TestAPIVersions checks that slurmrestd serves both data parser versions trainyard may
// speak, and that each sees the 4 GPU nodes.
func TestAPIVersions(t *testing.T) {
	tests := []struct {
		version string
		query   func(t *testing.T) (release string, responding bool, nodes []nodeSummary)
	}{
		{"v0.0.41", func(t *testing.T) (string, bool, []nodeSummary) {
			c := client41(t)
			ping, err := c.SlurmV0041GetPingWithResponse(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if ping.JSON200 == nil {
				t.Fatalf("ping: HTTP %d: %s", ping.StatusCode(), ping.Body)
			}
			// v0.0.41 has no "responding" flag yet, only the "pinged" text.
			responding := len(ping.JSON200.Pings) > 0 && deref(ping.JSON200.Pings[0].Pinged) == "UP"
			release := ""
			if m := ping.JSON200.Meta; m != nil && m.Slurm != nil && m.Slurm.Release != nil {
				release = *m.Slurm.Release
			}
			nodes, err := c.SlurmV0041GetNodesWithResponse(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if nodes.JSON200 == nil {
				t.Fatalf("nodes: HTTP %d: %s", nodes.StatusCode(), nodes.Body)
			}
			var out []nodeSummary
			for _, n := range nodes.JSON200.Nodes {
				s := nodeSummary{name: deref(n.Name), gres: deref(n.Gres)}
				if n.Partitions != nil {
					s.partitions = *n.Partitions
				}
				if n.State != nil {
					for _, st := range *n.State {
						s.states = append(s.states, string(st))
					}
				}
				out = append(out, s)
			}
			return release, responding, out
		}},
		{"v0.0.42", func(t *testing.T) (string, bool, []nodeSummary) {
			c := client42(t)
			ping, err := c.SlurmV0042GetPingWithResponse(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if ping.JSON200 == nil {
				t.Fatalf("ping: HTTP %d: %s", ping.StatusCode(), ping.Body)
			}
			responding := len(ping.JSON200.Pings) > 0 && ping.JSON200.Pings[0].Responding
			release := ""
			if m := ping.JSON200.Meta; m != nil && m.Slurm != nil && m.Slurm.Release != nil {
				release = *m.Slurm.Release
			}
			nodes, err := c.SlurmV0042GetNodesWithResponse(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if nodes.JSON200 == nil {
				t.Fatalf("nodes: HTTP %d: %s", nodes.StatusCode(), nodes.Body)
			}
			var out []nodeSummary
			for _, n := range nodes.JSON200.Nodes {
				s := nodeSummary{name: deref(n.Name), gres: deref(n.Gres)}
				if n.Partitions != nil {
					s.partitions = *n.Partitions
				}
				if n.State != nil {
					for _, st := range *n.State {
						s.states = append(s.states, string(st))
					}
				}
				out = append(out, s)
			}
			return release, responding, out
		}},
	}
	wantGres := map[string]string{"n1": "gpu:h100:4", "n2": "gpu:h100:4", "n3": "gpu:a100:4", "n4": "gpu:a100:4"}
	for _, tc := range tests {
		t.Run(tc.version, func(t *testing.T) {
			release, responding, nodes := tc.query(t)
			if !responding {
				t.Error("ping: slurmctld not responding")
			}
			if !strings.HasPrefix(release, "24.11") {
				t.Errorf("Slurm release = %q, want 24.11.x", release)
			}
			if len(nodes) != len(wantGres) {
				t.Fatalf("got %d nodes, want %d: %+v", len(nodes), len(wantGres), nodes)
			}
			for _, n := range nodes {
				want, ok := wantGres[n.name]
				if !ok {
					t.Errorf("unexpected node %q", n.name)
					continue
				}
				// Gres may carry a socket suffix, e.g. "gpu:h100:4(S:0)".
				if !strings.HasPrefix(n.gres, want) {
					t.Errorf("node %s gres = %q, want %s", n.name, n.gres, want)
				}
				for _, p := range []string{"gpu", "cpu"} {
					if !slices.Contains(n.partitions, p) {
						t.Errorf("node %s partitions = %v, want %s among them", n.name, n.partitions, p)
					}
				}
				for _, bad := range []string{"DOWN", "DRAIN", "FAIL", "NOT_RESPONDING"} {
					if slices.Contains(n.states, bad) {
						t.Errorf("node %s state = %v", n.name, n.states)
					}
				}
			}
		})
	}
}

// TestGPUJobTwoNodes runs a 2-node batch job with 2 GPUs per node whose srun step reports
// where it ran and which GPUs it got. Under the tree topology both nodes must hang off the
// same leaf switch (s1 = n1,n2 with h100; s2 = n3,n4 with a100).
func TestGPUJobTwoNodes(t *testing.T) {
	tests := []struct {
		name      string
		tres      string
		wantNodes [][]string // acceptable node sets
	}{
		{"any-gpu", "gres/gpu:2", [][]string{{"n1", "n2"}, {"n3", "n4"}}},
		{"h100", "gres/gpu:h100:2", [][]string{{"n1", "n2"}}},
		{"a100", "gres/gpu:a100:2", [][]string{{"n3", "n4"}}},
	}
	c := client42(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			script := "#!/bin/bash\nset -eu\n" +
				`srun --ntasks-per-node=1 bash -c 'echo "node=$SLURMD_NODENAME gpus=${CUDA_VISIBLE_DEVICES:-${SLURM_JOB_GPUS:-none}}"'` + "\n"
			desc := jobDesc("gpu-"+tc.name, "gpu", script)
			desc.MinimumNodes, desc.MaximumNodes = ptr(int32(2)), ptr(int32(2))
			desc.TasksPerNode = ptr(int32(1))
			desc.TresPerNode = ptr(tc.tres)
			id := submit(t, c, desc)
			job := waitTerminal(t, c, id, 2*time.Minute)

			if st := states(job); !slices.Contains(st, "COMPLETED") {
				t.Fatalf("job %d state = %v (reason %q), want COMPLETED; output:\n%s", id, st, deref(job.StateReason), readOutput(t, id))
			}
			if code := returnCode(job.ExitCode); code != 0 {
				t.Errorf("job %d exit code = %d, want 0", id, code)
			}
			if n := job.NodeCount; n == nil || n.Number == nil || *n.Number != 2 {
				t.Errorf("job %d node_count = %v, want 2", id, n)
			}
			apiNodes := hostnames(t, deref(job.Nodes))

			out := readOutput(t, id)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 2 {
				t.Fatalf("job %d output has %d lines, want one per node:\n%s", id, len(lines), out)
			}
			var ranOn []string
			for _, line := range lines {
				var node, gpus string
				for _, f := range strings.Fields(line) {
					if v, ok := strings.CutPrefix(f, "node="); ok {
						node = v
					}
					if v, ok := strings.CutPrefix(f, "gpus="); ok {
						gpus = v
					}
				}
				if node == "" {
					t.Errorf("output line %q has no node", line)
				}
				if g := strings.Split(gpus, ","); gpus == "none" || len(g) != 2 {
					t.Errorf("node %s saw GPUs %q, want 2 GPU indices", node, gpus)
				}
				ranOn = append(ranOn, node)
			}
			slices.Sort(ranOn)
			if len(slices.Compact(slices.Clone(ranOn))) != 2 {
				t.Errorf("tasks ran on %v, want 2 distinct nodes", ranOn)
			}
			if !slices.Equal(ranOn, apiNodes) {
				t.Errorf("tasks ran on %v but the API reports nodes %v", ranOn, apiNodes)
			}
			if !slices.ContainsFunc(tc.wantNodes, func(w []string) bool { return slices.Equal(w, ranOn) }) {
				t.Errorf("job ran on %v, want one of %v (same leaf switch / GPU type)", ranOn, tc.wantNodes)
			}
		})
	}
}

// TestJobExitCodes checks that the batch script's exit status reaches the API as the
// job's state and return code.
func TestJobExitCodes(t *testing.T) {
	tests := []struct {
		name      string
		script    string
		wantState string
		wantCode  int32
	}{
		{"exit-0", "#!/bin/bash\ntrue\n", "COMPLETED", 0},
		{"exit-3", "#!/bin/bash\necho failing on purpose\nexit 3\n", "FAILED", 3},
	}
	c := client42(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := submit(t, c, jobDesc(tc.name, "cpu", tc.script))
			job := waitTerminal(t, c, id, 2*time.Minute)
			if st := states(job); !slices.Contains(st, tc.wantState) {
				t.Errorf("job %d state = %v, want %s", id, st, tc.wantState)
			}
			if code := returnCode(job.ExitCode); code != tc.wantCode {
				t.Errorf("job %d exit code = %d, want %d", id, code, tc.wantCode)
			}
		})
	}
}

// TestCancelJob cancels a running job with DELETE /job/{id}.
func TestCancelJob(t *testing.T) {
	c := client42(t)
	id := submit(t, c, jobDesc("cancel-me", "cpu", "#!/bin/bash\nsleep 600\n"))
	waitFor(t, c, id, time.Minute, "RUNNING", func(st []string) bool {
		return slices.Contains(st, "RUNNING")
	})

	resp, err := c.SlurmV0042DeleteJobWithResponse(context.Background(), strconv.Itoa(int(id)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.JSON200 == nil {
		t.Fatalf("DELETE job %d: HTTP %d: %s", id, resp.StatusCode(), resp.Body)
	}
	if errs := resp.JSON200.Errors; errs != nil && len(*errs) > 0 {
		t.Fatalf("DELETE job %d: errors %s", id, resp.Body)
	}
	for _, s := range resp.JSON200.Status {
		if s.Error != nil && s.Error.Code != nil && *s.Error.Code != 0 {
			t.Errorf("DELETE job %d: %s", id, deref(s.Error.Message))
		}
	}
	job := waitTerminal(t, c, id, time.Minute)
	if st := states(job); !slices.Contains(st, "CANCELLED") {
		t.Errorf("job %d state after DELETE = %v, want CANCELLED", id, st)
	}
}

// jobDesc is a job for alice writing its output to outDir/<name>-<jobid>.out.
func jobDesc(name, partition, script string) v0042.V0042JobDescMsg {
	return v0042.V0042JobDescMsg{
		Name:                    ptr("it-" + name),
		Partition:               ptr(partition),
		Script:                  ptr(script),
		CurrentWorkingDirectory: ptr(outDir),
		StandardOutput:          ptr(outDir + "/%j.out"),
		// slurmrestd requires an explicit environment; nothing is inherited from the client.
		Environment: &v0042.V0042StringArray{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/" + tenant, "LANG=C.UTF-8"},
		TimeLimit:   &v0042.V0042Uint32NoValStruct{Set: ptr(true), Number: ptr(int32(5))},
	}
}

func submit(t *testing.T, c *v0042.ClientWithResponses, desc v0042.V0042JobDescMsg) int32 {
	t.Helper()
	resp, err := c.SlurmV0042PostJobSubmitWithResponse(context.Background(), v0042.V0042JobSubmitReq{Job: &desc})
	if err != nil {
		t.Fatal(err)
	}
	if resp.JSON200 == nil || resp.JSON200.JobId == nil {
		t.Fatalf("submit %s: HTTP %d: %s", deref(desc.Name), resp.StatusCode(), resp.Body)
	}
	if errs := resp.JSON200.Errors; errs != nil && len(*errs) > 0 {
		t.Fatalf("submit %s: errors %s", deref(desc.Name), resp.Body)
	}
	id := *resp.JSON200.JobId
	t.Logf("submitted job %d (%s)", id, deref(desc.Name))
	t.Cleanup(func() {
		// Leave no job behind for the next test when an assertion failed early.
		_, _ = c.SlurmV0042DeleteJobWithResponse(context.Background(), strconv.Itoa(int(id)), nil)
	})
	return id
}

func getJob(t *testing.T, c *v0042.ClientWithResponses, id int32) v0042.V0042JobInfo {
	t.Helper()
	resp, err := c.SlurmV0042GetJobWithResponse(context.Background(), strconv.Itoa(int(id)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.JSON200 == nil || len(resp.JSON200.Jobs) != 1 {
		t.Fatalf("GET job %d: HTTP %d: %s", id, resp.StatusCode(), resp.Body)
	}
	return resp.JSON200.Jobs[0]
}

var terminalStates = []string{"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
	"OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE"}

func waitTerminal(t *testing.T, c *v0042.ClientWithResponses, id int32, timeout time.Duration) v0042.V0042JobInfo {
	t.Helper()
	return waitFor(t, c, id, timeout, "a terminal state", func(st []string) bool {
		return slices.ContainsFunc(st, func(s string) bool { return slices.Contains(terminalStates, s) })
	})
}

// waitFor polls the job through the REST API until its states satisfy ok.
func waitFor(t *testing.T, c *v0042.ClientWithResponses, id int32, timeout time.Duration, what string, ok func([]string) bool) v0042.V0042JobInfo {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		job := getJob(t, c, id)
		if ok(states(job)) {
			return job
		}
		if time.Now().After(deadline) {
			out, _ := cluster.Exec(context.Background(), "squeue", "-a", "-o", "%i %T %R %N")
			t.Fatalf("job %d still %v (reason %q) after %s, want %s; squeue:\n%s", id, states(job), deref(job.StateReason), timeout, what, out)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func states(j v0042.V0042JobInfo) []string {
	var out []string
	if j.JobState != nil {
		for _, s := range *j.JobState {
			out = append(out, string(s))
		}
	}
	return out
}

func returnCode(e *v0042.V0042ProcessExitCodeVerbose) int32 {
	if e == nil || e.ReturnCode == nil || e.ReturnCode.Number == nil {
		return -1
	}
	return *e.ReturnCode.Number
}

// hostnames expands a Slurm hostlist ("n[1-2]") with the real `scontrol show hostnames`.
func hostnames(t *testing.T, list string) []string {
	t.Helper()
	if list == "" {
		return nil
	}
	out, err := cluster.Exec(context.Background(), "scontrol", "show", "hostnames", list)
	if err != nil {
		t.Fatal(err)
	}
	names := strings.Fields(string(out))
	slices.Sort(names)
	return names
}

func readOutput(t *testing.T, id int32) string {
	t.Helper()
	b, err := os.ReadFile(cluster.Path(fmt.Sprintf("%s/%d.out", outDir, id)))
	if err != nil {
		t.Errorf("job %d output: %v", id, err)
	}
	return string(b)
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

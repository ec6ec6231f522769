package slurm

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

func TestExpandHostlist(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr string
	}{
		{in: "n1", want: []string{"n1"}},
		{in: "n[1-3]", want: []string{"n1", "n2", "n3"}},
		{in: "n[1-2,5],gpu7", want: []string{"n1", "n2", "n5", "gpu7"}},
		{in: "g[08-10]x", want: []string{"g08x", "g09x", "g10x"}},
		{in: "r[1-2]n[1-2]", want: []string{"r1n1", "r1n2", "r2n1", "r2n2"}},
		{in: "n[3-1]", wantErr: "bad range"},
		{in: "n[1-2", wantErr: "unbalanced ["},
		{in: "n1]", wantErr: "unbalanced ]"},
		{in: "n[0-99999999]", wantErr: "more than"},
	}
	for _, tc := range tests {
		got, err := ExpandHostlist(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ExpandHostlist(%q) error = %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ExpandHostlist(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseTopology(t *testing.T) {
	tests := []struct {
		name       string
		conf       string
		wantLevels []string
		wantPath   map[string][]string
		wantErr    string
	}{{
		name:       "tree with a root",
		conf:       "# harness\nSwitchName=s1 Nodes=n[1-2]\nSwitchName=s2 Nodes=n[3-4]\nSwitchName=root Switches=s[1-2]\n",
		wantLevels: []string{UpperSwitchLevel(1), SwitchLevel},
		wantPath:   map[string][]string{"n1": {"root", "s1"}, "n4": {"root", "s2"}},
	}, {
		name:       "scontrol show topology output",
		conf:       "SwitchName=s1 Level=0 LinkSpeed=1 Nodes=n[1-2]\nSwitchName=s2 Level=0 LinkSpeed=1 Nodes=n3\n",
		wantLevels: []string{SwitchLevel},
		wantPath:   map[string][]string{"n2": {"s1"}, "n3": {"s2"}},
	}, {
		name:       "uneven tree pads the short branch with its top switch",
		conf:       "SwitchName=a Nodes=n1\nSwitchName=b Nodes=n2\nSwitchName=mid Switches=a\nSwitchName=top Switches=mid,b\n",
		wantLevels: []string{UpperSwitchLevel(2), UpperSwitchLevel(1), SwitchLevel},
		wantPath:   map[string][]string{"n1": {"top", "mid", "a"}, "n2": {"top", "top", "b"}},
	}, {
		name:       "blocks",
		conf:       "BlockName=b1 Nodes=n[1-2]\nBlockName=b2 Nodes=n[3-4]\nBlockSizes=2,4\n",
		wantLevels: []string{BlockLevel},
		wantPath:   map[string][]string{"n1": {"b1"}, "n3": {"b2"}},
	}, {
		name:    "unknown child switch",
		conf:    "SwitchName=root Switches=s9\n",
		wantErr: "unknown switch s9",
	}, {
		name:    "garbage",
		conf:    "NodeName=n1\n",
		wantErr: "neither SwitchName nor BlockName",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			topo, err := ParseTopology(strings.NewReader(tc.conf))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(topo.Levels, tc.wantLevels) {
				t.Errorf("levels = %v, want %v", topo.Levels, tc.wantLevels)
			}
			for n, want := range tc.wantPath {
				if got := topo.Path[n]; !slices.Equal(got, want) {
					t.Errorf("path of %s = %v, want %v", n, got, want)
				}
			}
		})
	}
}

func TestGresCount(t *testing.T) {
	for in, want := range map[string]int64{
		"gpu:h100:4":                  4,
		"gpu:4":                       4,
		"gpu:h100:2(IDX:0-1)":         2,
		"gpu:h100:0(IDX:N/A)":         0,
		"gpu:a100:2(S:0),gpu:h100:1":  3,
		"shard:8,gpu:h100:4(S:0-1)":   4,
		"":                            0,
		"(null)":                      0,
		"gpu:h100:1(IDX:0,2),shard:3": 1,
	} {
		if got := gresCount(in); got != want {
			t.Errorf("gresCount(%q) = %d, want %d", in, got, want)
		}
	}
}

func job(states ...string) *JobInfo {
	return &JobInfo{JobID: 7, JobState: states, Nodes: "n[1-2]", NodeCount: &noVal{Set: true, Number: 2}}
}

func withExit(j *JobInfo, rc, sig int64) *JobInfo {
	j.ExitCode = &ExitCodeInfo{ReturnCode: &noVal{Set: true, Number: rc}}
	if sig > 0 {
		j.ExitCode.Signal = &struct {
			ID   *noVal `json:"id"`
			Name string `json:"name"`
		}{ID: &noVal{Set: true, Number: sig}}
	}
	return j
}

func withReason(j *JobInfo, reason string) *JobInfo { j.StateReason = reason; return j }

func TestStatusOf(t *testing.T) {
	requeued := job("PENDING")
	requeued.RestartCount = 1
	tests := []struct {
		name       string
		job        *JobInfo
		phase      v1alpha1.DispatchPhase
		reason     string
		exit       int32 // -1: none
		ended      bool
		msgContain string
	}{
		{"pending", job("PENDING"), v1alpha1.DispatchSubmitted, "", -1, false, "pending"},
		{"requeued after node failure", requeued, v1alpha1.DispatchSubmitted, v1alpha1.ReasonSlurmRequeued, -1, false, "restart 1"},
		{"requeue in progress", job("COMPLETING", "REQUEUED"), v1alpha1.DispatchSubmitted, v1alpha1.ReasonSlurmRequeued, -1, false, "requeued"},
		{"running", job("RUNNING"), v1alpha1.DispatchRunning, "", -1, false, "running on n[1-2]"},
		{"configuring", job("CONFIGURING"), v1alpha1.DispatchRunning, "", -1, false, "running"},
		{"completed", withExit(job("COMPLETED"), 0, 0), v1alpha1.DispatchSucceeded, "", 0, true, "completed"},
		{"completed but still cleaning up", withExit(job("COMPLETED", "COMPLETING"), 0, 0), v1alpha1.DispatchRunning, "", 0, false, "completing"},
		{"failed", withExit(job("FAILED"), 3, 0), v1alpha1.DispatchFailed, v1alpha1.ReasonRemoteFailed, 3, true, "exit code 3"},
		{"killed by a signal", withExit(job("FAILED"), 0, 9), v1alpha1.DispatchFailed, v1alpha1.ReasonRemoteFailed, 137, true, "exit code 137"},
		{"cancelled", withExit(job("CANCELLED"), 0, 15), v1alpha1.DispatchCancelled, "", 143, true, "cancelled"},
		{"its work directory could not be made", withReason(job("CANCELLED"), "DependencyNeverSatisfied"), v1alpha1.DispatchFailed, v1alpha1.ReasonRemoteFailed, -1, true, "the job that makes its user's work directory (trainyard-workdir) failed"},
		{"timeout", job("TIMEOUT"), v1alpha1.DispatchFailed, v1alpha1.ReasonSlurmTimeLimit, -1, true, "time limit"},
		{"node failure", job("NODE_FAIL"), v1alpha1.DispatchFailed, v1alpha1.ReasonSlurmNodeFail, -1, true, "node"},
		{"preempted", job("PREEMPTED"), v1alpha1.DispatchFailed, v1alpha1.ReasonSlurmPreempted, -1, true, "preempted"},
		{"out of memory", withExit(job("OUT_OF_MEMORY"), 0, 9), v1alpha1.DispatchFailed, v1alpha1.ReasonSlurmOutOfMemory, 137, true, "memory"},
		{"boot failure", job("BOOT_FAIL"), v1alpha1.DispatchFailed, v1alpha1.ReasonRemoteFailed, -1, true, "BOOT_FAIL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := StatusOf(tc.job)
			if st.Phase != tc.phase || st.Reason != tc.reason {
				t.Errorf("phase, reason = %s, %q; want %s, %q", st.Phase, st.Reason, tc.phase, tc.reason)
			}
			switch {
			case tc.exit < 0 && st.ExitCode != nil:
				t.Errorf("exit code = %d, want none", *st.ExitCode)
			case tc.exit >= 0 && (st.ExitCode == nil || *st.ExitCode != tc.exit):
				t.Errorf("exit code = %v, want %d", st.ExitCode, tc.exit)
			}
			if !strings.Contains(st.Message, tc.msgContain) {
				t.Errorf("message %q does not say %q", st.Message, tc.msgContain)
			}
			if Ended(tc.job) != tc.ended {
				t.Errorf("Ended = %v, want %v", !tc.ended, tc.ended)
			}
		})
	}
}

func TestCapacityOf(t *testing.T) {
	nodes := []NodeInfo{
		{Name: "n1", State: []string{"MIXED"}, Gres: "gpu:h100:4", GresUsed: "gpu:h100:3(IDX:0-2)", Partitions: []string{"gpu", "cpu"}, CPUs: 4, AllocCPUs: 1},
		{Name: "n2", State: []string{"IDLE"}, Gres: "gpu:h100:4", GresUsed: "gpu:h100:0(IDX:N/A)", Partitions: []string{"gpu"}, CPUs: 4},
		{Name: "n3", State: []string{"IDLE", "DRAIN"}, Gres: "gpu:a100:4", Partitions: []string{"gpu"}, CPUs: 4},
		{Name: "n4", State: []string{"IDLE"}, Gres: "gpu:a100:8", Partitions: []string{"other"}, CPUs: 4},
		{Name: "n5", State: []string{"DOWN", "NOT_RESPONDING"}, Gres: "gpu:h100:4", Partitions: []string{"gpu"}, CPUs: 4},
	}
	topo, err := ParseTopology(strings.NewReader("SwitchName=s1 Nodes=n[1-2]\nSwitchName=s2 Nodes=n[3-4]\nSwitchName=root Switches=s[1-2]\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := CapacityOf(nodes, map[string]bool{"gpu": true}, topo)
	gpus, free := c.Capacity[v1alpha1.GPUResource], c.Free[v1alpha1.GPUResource]
	if gpus.Value() != 16 || free.Value() != 5 {
		t.Errorf("GPUs = %s, free = %s; want 16 (n4 is outside the partitions), 5 (n3 drained, n5 down)", gpus.String(), free.String())
	}
	if c.MaxGPUsPerNode != 4 {
		t.Errorf("max GPUs per node = %d, want 4", c.MaxGPUsPerNode)
	}
	wantLevels := []string{UpperSwitchLevel(1), SwitchLevel, HostnameLevel}
	if !slices.Equal(c.Topology.Levels, wantLevels) {
		t.Fatalf("levels = %v, want %v", c.Topology.Levels, wantLevels)
	}
	type dom struct {
		values, nodes string
		free          []int32
	}
	var got []dom
	for _, d := range c.Topology.Domains {
		got = append(got, dom{strings.Join(d.Values, "/"), strings.Join(d.Nodes, ","), d.FreeGPUsPerNode})
	}
	want := []dom{{"none/none", "n5", []int32{0}}, {"root/s1", "n1,n2", []int32{1, 4}}, {"root/s2", "n3", []int32{0}}}
	if len(got) != len(want) {
		t.Fatalf("domains = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].values != want[i].values || got[i].nodes != want[i].nodes || !slices.Equal(got[i].free, want[i].free) {
			t.Errorf("domain %d = %+v, want %+v", i, got[i], want[i])
		}
	}

	flat := CapacityOf(nodes, map[string]bool{"gpu": true}, nil)
	if len(flat.Topology.Domains) != 1 || len(flat.Topology.Domains[0].Nodes) != 4 || !slices.Equal(flat.Topology.Levels, []string{HostnameLevel}) {
		t.Errorf("without topology: %+v, want one domain of 4 nodes at the node level", flat.Topology)
	}
}

func TestSigningKeySource(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	reads := 0
	now := time.Unix(1_700_000_000, 0)
	s := &SigningKeySource{Key: func(context.Context) ([]byte, error) { reads++; return key, nil },
		Lifetime: 10 * time.Minute, Now: func() time.Time { return now }}
	c, err := s.Credentials(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if c.User != "alice" {
		t.Errorf("user = %q", c.User)
	}
	parts := strings.Split(c.Token, ".")
	if len(parts) != 3 {
		t.Fatalf("token has %d parts", len(parts))
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(parts[0] + "." + parts[1]))
	if base64.RawURLEncoding.EncodeToString(mac.Sum(nil)) != parts[2] {
		t.Error("signature does not verify with the key")
	}
	body, _ := base64.RawURLEncoding.DecodeString(parts[1])
	var claims map[string]any
	if err := json.Unmarshal(body, &claims); err != nil {
		t.Fatal(err)
	}
	if claims["sun"] != "alice" || int64(claims["exp"].(float64)) != now.Add(10*time.Minute).Unix() {
		t.Errorf("claims = %v", claims)
	}
	// Cached until half its life, then renewed from a fresh read of the key.
	now = now.Add(4 * time.Minute)
	again, _ := s.Credentials(context.Background(), "alice")
	if again.Token != c.Token || reads != 1 {
		t.Errorf("token renewed too early (reads %d)", reads)
	}
	now = now.Add(2 * time.Minute)
	renewed, _ := s.Credentials(context.Background(), "alice")
	if renewed.Token == c.Token || reads != 2 {
		t.Errorf("token not renewed after half its lifetime (reads %d)", reads)
	}
	bob, _ := s.Credentials(context.Background(), "bob")
	if bob.Token == renewed.Token {
		t.Error("bob got alice's token")
	}
	short := &SigningKeySource{Key: func(context.Context) ([]byte, error) { return []byte("tiny"), nil }}
	if _, err := short.Credentials(context.Background(), "alice"); err == nil || strings.Contains(err.Error(), "tiny") {
		t.Errorf("short key: error %v, want a refusal that does not echo the key", err)
	}
}

func TestStaticTokenSource(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	mk := func(exp time.Time) string {
		tok, _ := signHS256([]byte("k"), map[string]any{"exp": exp.Unix(), "sun": "slurm"})
		return tok
	}
	current := "SLURM_JWT=" + mk(now.Add(time.Hour)) + "\n"
	s := &StaticTokenSource{Token: func(context.Context) ([]byte, error) { return []byte(current), nil },
		Now: func() time.Time { return now }, Refresh: 10 * time.Minute}
	c, err := s.Credentials(context.Background(), "alice")
	if err != nil || c.User != "alice" || strings.Contains(c.Token, "SLURM_JWT") || strings.ContainsAny(c.Token, "\n ") {
		t.Fatalf("credentials = %+v, %v", c, err)
	}
	first := c.Token
	current = mk(now.Add(2 * time.Hour))
	now = now.Add(11 * time.Minute)
	c, _ = s.Credentials(context.Background(), "alice")
	if c.Token == first {
		t.Error("rotated token not picked up after the refresh interval")
	}
	// An expired token that is not rotated is refused rather than sent.
	now = now.Add(11 * time.Minute)
	current = mk(now.Add(30 * time.Second))
	if _, err := s.Credentials(context.Background(), "alice"); err != nil {
		t.Fatalf("token still valid for 30s: %v", err)
	}
	now = now.Add(time.Minute)
	if _, err := s.Credentials(context.Background(), "alice"); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("expired token: error = %v", err)
	}
}

// TestExistingJobLookup: a submit trusts the kept job list only when it was
// taken after the backend started (so it holds every earlier agent's jobs),
// adds this process's own submits, and otherwise lists afresh.
func TestExistingJobLookup(t *testing.T) {
	start := time.Now()
	unreachable, err := NewClient("http://127.0.0.1:1", "v0.0.42",
		&SigningKeySource{Key: func(context.Context) ([]byte, error) { return []byte("0123456789abcdef0123456789abcdef"), nil }}, "slurm", nil)
	if err != nil {
		t.Fatal(err)
	}
	b := &Backend{Client: unreachable, created: start, submitted: map[string]int32{"trainyard:mine": 9}}
	ctx := context.Background()

	// Before any list: the own submit is known without one...
	if id, err := b.existing(ctx, "trainyard:mine"); err != nil || id != 9 {
		t.Errorf("own submit: %d, %v; want 9", id, err)
	}
	// ...anything else needs a fresh list, which fails here.
	if _, err := b.existing(ctx, "trainyard:other"); err == nil {
		t.Error("looked up without a list taken after start")
	}
	// A list taken before the backend started is not trusted either.
	b.listed, b.listedAt = map[string][]int32{"trainyard:old": {3}}, start.Add(-time.Second)
	if _, err := b.existing(ctx, "trainyard:old"); err == nil {
		t.Error("trusted a list older than the backend")
	}
	// A list taken after start answers both ways without the cluster.
	b.listedAt = start.Add(time.Second)
	if id, err := b.existing(ctx, "trainyard:old"); err != nil || id != 3 {
		t.Errorf("kept list: %d, %v; want 3", id, err)
	}
	if id, err := b.existing(ctx, "trainyard:new"); err != nil || id != 0 {
		t.Errorf("absent job: %d, %v; want 0", id, err)
	}
}

package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestClaimRunningRelease(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dev")
	if _, ok := Running(dir); ok {
		t.Fatal("nothing runs in a new folder")
	}
	if err := Claim(dir); err != nil {
		t.Fatal(err)
	}
	pid, ok := Running(dir)
	if !ok || pid != os.Getpid() {
		t.Fatalf("Running = %d, %v; want this process, %d", pid, ok, os.Getpid())
	}
	// The lock belongs to the open pid file, so a second claim fails even
	// from this process, as it would from another one.
	saved := claimed
	err := Claim(dir)
	if err == nil || !strings.Contains(err.Error(), "a sandbox runs in "+dir+" already") {
		t.Fatalf("second Claim: %v", err)
	}
	claimed = saved
	if err := MarkReady(dir, "ready"); err != nil {
		t.Fatal(err)
	}
	Release(dir)
	if _, ok := Running(dir); ok {
		t.Fatal("still running after Release")
	}
	for _, f := range []string{pidFile, readyFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); !os.IsNotExist(err) {
			t.Errorf("%s left after Release: %v", f, err)
		}
	}
	// A stale pid file nobody holds does not count as a running sandbox.
	if err := os.WriteFile(filepath.Join(dir, pidFile), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if pid, ok := Running(dir); ok {
		t.Fatalf("a stale pid file counts as sandbox %d", pid)
	}
}

func TestCleanKeepsTheState(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{pidFile, logFile, "trainyard.log", "hub/admin.kubeconfig"} {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := clean(dir); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if strings.Join(left, ",") != logFile+","+pidFile {
		t.Fatalf("left after clean: %v", left)
	}
}

func TestValidate(t *testing.T) {
	for _, good := range []Options{
		{Dir: "/tmp/x", Spokes: 1, Nodes: 1, GPUsPerNode: 8},
		{Dir: "/tmp/x", Spokes: 1, Nodes: 1, GPUsPerNode: 8, SlurmInstance: 8},
	} {
		if err := good.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []Options{
		{Spokes: 1, Nodes: 1, GPUsPerNode: 8},
		{Dir: "d", Spokes: -1, Nodes: 1, GPUsPerNode: 8},
		{Dir: "d", Spokes: 0, NoSlurm: true, Nodes: 1, GPUsPerNode: 8},
		{Dir: "d", Spokes: 1, Nodes: 0, GPUsPerNode: 8},
		{Dir: "d", Spokes: 1, Nodes: 1, GPUsPerNode: 0},
		{Dir: "d", Spokes: 1, Nodes: 1, GPUsPerNode: 8, Samples: -1},
		{Dir: "d", Spokes: 1, Nodes: 1, GPUsPerNode: 8, SlurmInstance: -1},
		{Dir: "d", Spokes: 1, Nodes: 1, GPUsPerNode: 8, SlurmInstance: 9}, // its OCI cluster would be 10
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v passed", bad)
		}
	}
}

package fleet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRepoRoot(t *testing.T) {
	checkout := t.TempDir()
	if err := os.WriteFile(filepath.Join(checkout, "go.mod"), []byte("module "+modulePath+"\n\ngo 1.25\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	deep := filepath.Join(checkout, "test", "integration", "x")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "go.mod"), []byte("module example.com/other\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	plugin := filepath.Join(checkout, "bin", "kubectl-trainyard")
	elsewhere := filepath.Join(other, "kubectl-trainyard")
	tests := []struct {
		name, repoEnv, wd, exe, want, wantErr string
	}{
		{name: "working directory deep in a checkout", wd: deep, exe: elsewhere, want: checkout},
		{name: "plugin built into a checkout, run from elsewhere", wd: other, exe: plugin, want: checkout},
		{name: "TRAINYARD_REPO wins over the working directory", repoEnv: checkout, wd: other, exe: elsewhere, want: checkout},
		{name: "TRAINYARD_REPO below a checkout is refused", repoEnv: deep, wd: deep, exe: plugin, wantErr: "is not a trainyard checkout"},
		{name: "another module's go.mod is not a checkout", wd: other, exe: elsewhere, wantErr: "set TRAINYARD_REPO"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := repoRoot(tc.repoEnv, tc.wd, tc.exe)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("repoRoot() = %q, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("repoRoot() = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

package api

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
)

// TestClusterFolderRemovedOnStop: a harness cluster started without a
// folder removes the one it made (logs and the admin kubeconfig) when it
// stops; one given a folder keeps it.
func TestClusterFolderRemovedOnStop(t *testing.T) {
	given := t.TempDir()
	for name, dir := range map[string]string{"made": "", "given": filepath.Join(given, "c")} {
		t.Run(name, func(t *testing.T) {
			c, err := kube.Start(context.Background(), kube.Options{Name: "folder-" + name, Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(c.Kubeconfig); err != nil {
				_ = c.Stop()
				t.Fatalf("admin kubeconfig: %v", err)
			}
			if err := c.Stop(); err != nil {
				t.Fatal(err)
			}
			_, err = os.Stat(c.Dir)
			switch {
			case dir == "" && !os.IsNotExist(err):
				t.Errorf("folder %s made by Start is still there after Stop (%v)", c.Dir, err)
			case dir != "" && err != nil:
				t.Errorf("given folder %s gone after Stop: %v", dir, err)
			}
		})
	}
}

package slurm

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
)

// A first `dev up` on a fresh machine failed: cluster 0 configured the built
// chroot in place while cluster 1's clone was copied from it, and cp met a
// lock file groupadd had made and removed ("cp: cannot stat
// .../etc/group.lock"). Here several processes clone the built chroot at
// once, two of them the same clone, while configure.sh writes a clone made
// just before: every clone must be whole, the two makers of one clone must
// get the same one, and the built chroot must not change. The scripts refuse
// to configure the built chroot and to clone a clone.
//
// Needs what the harness needs (root, the chroot of `make slurm-root`) and
// about 200 MB of disk per clone, for a minute at most (45 s on 2 busy cores).
func TestClonesAreWholeWhileAnotherIsConfigured(t *testing.T) {
	if testing.Short() {
		t.Skip("copies the Slurm chroot several times")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root (chroot, cp -a), as the Slurm harness does")
	}
	root, err := FindRoot("")
	if err != nil {
		t.Skip(err)
	}
	repo, err := fleet.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env := "CLONE_DIR=" + cloneDir(t, root)
	before := tree(t, root, skipMounts, true)

	built := &Cluster{Root: root, repo: repo, log: io.Discard}
	if err := built.script(ctx, "configure.sh"); err == nil {
		t.Error("configure.sh configured the built chroot")
	}
	first, err := built.clone(ctx, "a", env)
	if err != nil {
		t.Fatal(err)
	}
	configured := &Cluster{Root: first, repo: repo, log: io.Discard}
	if _, err := configured.clone(ctx, "x", env); err == nil {
		t.Error("clone-root.sh cloned a clone")
	}

	names := []string{"b", "b", "c"}
	got := make([]string, len(names))
	errs := make([]error, len(names)+1)
	var wg sync.WaitGroup
	wg.Go(func() {
		errs[len(names)] = configured.script(ctx, "configure.sh", "CLUSTER_NAME=cloned", "PORT_OFFSET=990")
	})
	for i, name := range names {
		wg.Go(func() { got[i], errs[i] = built.clone(ctx, name, env) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got[0] != got[1] {
		t.Errorf("two makers of clone b got %s and %s", got[0], got[1])
	}
	want := tree(t, root, skipState, false)
	for _, clone := range slices.Compact(got) {
		if diff := diffTrees(want, tree(t, clone, skipState, false)); diff != "" {
			t.Errorf("clone %s is not the built chroot without its state (-built +clone):\n%s", clone, diff)
		}
	}
	if env, err := os.ReadFile(filepath.Join(first, "etc/slurm/harness.env")); err != nil || !strings.Contains(string(env), "CLUSTER_NAME=cloned") {
		t.Errorf("clone a not configured: %q, %v", env, err)
	}
	if diff := diffTrees(before, tree(t, root, skipMounts, true)); diff != "" {
		t.Errorf("the built chroot changed (-before +after):\n%s", diff)
	}
}

// cloneDir is an empty directory, removed after the test, on root's
// filesystem (a clone hard-links root's /usr): the test's temp dir when it
// is there, else one beside root.
func cloneDir(t *testing.T, root string) string {
	dir := t.TempDir()
	var a, b syscall.Stat_t
	if syscall.Stat(dir, &a) == nil && syscall.Stat(root, &b) == nil && a.Dev == b.Dev {
		return dir
	}
	dir, err := os.MkdirTemp(filepath.Dir(root), ".test-clones-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// skipMounts leaves out what start.sh mounts over.
func skipMounts(rel string) bool {
	return slices.Contains([]string{"proc", "sys", "dev"}, rel)
}

// skipState also leaves out what a clone does not take from the built
// chroot (clone-root.sh): the contents of its scratch directories, a
// cluster's keys, state and records, and top-level dot entries (the clone's
// marker; oci.sh's pivot_root point in a chroot a cluster once ran in).
func skipState(rel string) bool {
	if strings.HasPrefix(rel, ".") && !strings.Contains(rel, "/") {
		return true
	}
	for _, dir := range []string{"proc", "sys", "dev", "run", "tmp", "var/lib/mysql", "var/spool/slurmctld",
		"var/spool/slurmd", "var/log/slurm", "var/log/mysql", "var/log/munge", "var/lib/munge"} {
		if strings.HasPrefix(rel, dir+"/") {
			return true
		}
	}
	return slices.Contains([]string{"var/lib/mysql", "etc/munge/munge.key", "etc/slurm/jwt_hs256.key",
		"etc/slurm/harness.env"}, rel)
}

// tree describes every file below dir that skip keeps: type and mode,
// owner, size, a symlink's target, for a file under /usr (but /usr/local)
// its inode, as a clone shares those, and with mtimes its modification time.
func tree(t *testing.T, dir string, skip func(rel string) bool, mtimes bool) map[string]string {
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel != "." && skip(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		desc := fmt.Sprintf("%v %d:%d", info.Mode(), st.Uid, st.Gid)
		switch {
		case info.Mode().IsRegular():
			desc += fmt.Sprintf(" %dB", info.Size())
			if strings.HasPrefix(rel, "usr/") && !strings.HasPrefix(rel, "usr/local/") {
				desc += fmt.Sprintf(" inode %d", st.Ino)
			}
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		}
		if mtimes {
			desc += " " + info.ModTime().UTC().Format(time.RFC3339Nano)
		}
		files[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// diffTrees lists up to 20 files that differ between a and b.
func diffTrees(a, b map[string]string) string {
	var lines []string
	for p, da := range a {
		if db, ok := b[p]; !ok {
			lines = append(lines, "-"+p+": "+da)
		} else if da != db {
			lines = append(lines, "-"+p+": "+da, "+"+p+": "+db)
		}
	}
	for p, db := range b {
		if _, ok := a[p]; !ok {
			lines = append(lines, "+"+p+": "+db)
		}
	}
	slices.SortStableFunc(lines, func(x, y string) int { return strings.Compare(x[1:], y[1:]) })
	if n := len(lines); n > 20 {
		lines = append(lines[:20], fmt.Sprintf("... and %d more", n-20))
	}
	return strings.Join(lines, "\n")
}

package slurm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestSubmitMakesTheWorkDirFirst: a job whose work directory the agent
// cannot see is held after a job that makes it, submitted as the same user;
// one such job serves every job of the directory while it runs, none is
// needed once it completed or the agent sees the directory, and a failed
// one is tried again.
func TestSubmitMakesTheWorkDirFirst(t *testing.T) {
	ctx := context.Background()
	f := &fakeSlurmrestd{}
	b, clk := fakeBackend(t, f)
	b.OutputRoot = t.TempDir() // the directories are not there yet
	dir := "/home/svc_a/.trainyard"
	n := 0
	submit := func() jobDesc {
		t.Helper()
		n++
		clk.Step(time.Second)
		d := dispatch(caseSpec{})
		d.Name, d.Spec.Workload.UID = fmt.Sprintf("d%d", n), types.UID(fmt.Sprintf("uid-%d", n))
		if _, err := b.Submit(ctx, d); err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.descs[len(f.descs)-1]
	}
	setState := func(id int32, state string) {
		f.mu.Lock()
		for i := range f.jobs {
			if f.jobs[i].JobID == id {
				f.jobs[i].JobState = []string{state}
			}
		}
		f.mu.Unlock()
		clk.Step(time.Second)
		if _, err := b.ListJobs(ctx); err != nil {
			t.Fatal(err)
		}
	}

	first := submit()
	if len(f.descs) != 2 {
		t.Fatalf("%d submits, want the work directory's job and the job", len(f.descs))
	}
	mk := f.descs[0]
	if mk.Name != WorkDirJobName || mk.Comment != WorkDirCommentPrefix+dir || mk.Script != workDirScript || mk.StandardOutput != "/dev/null" ||
		mk.CurrentWorkingDirectory != "/" || !containsString(mk.Environment, EnvWorkDir+"="+dir) || mk.Partition != first.Partition || mk.Account != first.Account {
		t.Errorf("work directory job = %+v, want the fixed script making %s in the job's partition and account", mk, dir)
	}
	if first.Dependency != "afterok:100" || !containsString(first.Flags, "KILL_INVALID_DEPENDENCY") || first.CurrentWorkingDirectory != dir {
		t.Errorf("job: dependency %q flags %q work dir %q; want afterok:100, KILL_INVALID_DEPENDENCY, %s", first.Dependency, first.Flags, first.CurrentWorkingDirectory, dir)
	}
	if _, ok := parseAny(mk.Comment); ok {
		t.Errorf("the work directory job's comment %q parses as a Dispatch's", mk.Comment)
	}

	setState(100, "RUNNING")
	if second := submit(); second.Dependency != "afterok:100" || len(f.descs) != 3 {
		t.Errorf("while it runs: dependency %q after %d submits; want afterok:100 and no second work directory job", second.Dependency, len(f.descs))
	}
	setState(100, "FAILED")
	if third := submit(); third.Dependency != "afterok:103" || len(f.descs) != 5 {
		t.Errorf("after it failed: dependency %q after %d submits; want a new work directory job (103)", third.Dependency, len(f.descs))
	}
	setState(103, "COMPLETED")
	if fourth := submit(); fourth.Dependency != "" || len(f.descs) != 6 {
		t.Errorf("after it completed: dependency %q after %d submits; want none", fourth.Dependency, len(f.descs))
	}

	// Another agent process, which sees the directory: nothing first.
	b2, clk2 := fakeBackend(t, f)
	clk2.Step(time.Second)
	d := dispatch(caseSpec{})
	d.Name = "other"
	if _, err := b2.Submit(ctx, d); err != nil {
		t.Fatal(err)
	}
	if last := f.descs[len(f.descs)-1]; last.Dependency != "" || len(f.descs) != 7 {
		t.Errorf("a directory the agent sees: dependency %q after %d submits; want none", last.Dependency, len(f.descs))
	}
}

func parseAny(comment string) (string, bool) {
	target, _, ok := ParseComment(comment)
	return target, ok
}

// TestSeesOnlyAPrivateWorkDir: a directory others may write to, or a
// symlink, is not taken as the user's work directory.
func TestSeesOnlyAPrivateWorkDir(t *testing.T) {
	b := &Backend{OutputRoot: t.TempDir()}
	mk := func(name string, mode os.FileMode) string {
		if err := os.Mkdir(filepath.Join(b.OutputRoot, name), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(b.OutputRoot, name), mode); err != nil {
			t.Fatal(err)
		}
		return "/" + name
	}
	private, open := mk("private", 0o700), mk("open", 0o777)
	if err := os.Symlink(filepath.Join(b.OutputRoot, "private"), filepath.Join(b.OutputRoot, "link")); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]bool{private: true, open: false, "/link": false, "/missing": false} {
		if got := b.sees(dir); got != want {
			t.Errorf("sees(%s) = %v, want %v", dir, got, want)
		}
	}
}

// TestWorkDirScript runs the script of the job that makes a work
// directory: it makes it 0700, and fails on a symlink in its place.
func TestWorkDirScript(t *testing.T) {
	bash := requireBash(t)
	root := t.TempDir()
	run := func(dir string) error {
		cmd := exec.Command(bash, "-c", workDirScript)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), EnvWorkDir + "=" + dir}
		return cmd.Run()
	}
	dir := filepath.Join(root, "home", "u", ".trainyard")
	if err := run(dir); err != nil {
		t.Fatalf("making %s: %v", dir, err)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("made %v, %v; want a 0700 directory", fi, err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := run(dir); err != nil {
		t.Fatalf("again: %v", err)
	}
	if fi, _ := os.Lstat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("an existing directory left %v, want 0700", fi.Mode().Perm())
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if err := run(link); err == nil {
		t.Error("a symlink in the directory's place was accepted")
	}
}

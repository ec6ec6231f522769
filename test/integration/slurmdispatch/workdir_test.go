package slurmdispatch

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/slurm"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// TestDefaultWorkDirIsTheUsersOwn: on a Target that names no work
// directory, a job runs and writes its output in a directory of its user's
// own home that no one made beforehand: a job the agent submits as the
// user makes it (0700) before the job starts, never a shared /tmp name,
// and `trainyard logs` reads the batch host's output there.
func TestDefaultWorkDirIsTheUsersOwn(t *testing.T) {
	ctx := context.Background()
	dir := strings.ReplaceAll(slurm.DefaultWorkDir, "%u", slurmUser)
	if err := os.RemoveAll(env.cluster.Path(dir)); err != nil {
		t.Fatal(err)
	}
	setWorkDir(t, "")
	t.Cleanup(func() { setWorkDir(t, workDir) })

	makeRuntime(t, "home-slurm", tytesting.TorchRuntimeSpec(1))
	tj := submit(t, trainJob("home", "home-slurm", 1, 1, "bash", "-c", `echo "ran in $PWD"; echo warn >&2`))
	d := dispatchOf(t, tj, phaseIs(v1alpha1.DispatchSucceeded))
	out := dir + "/" + d.Status.Remote.Name + "." + d.Status.Remote.ID + ".out"
	for p, want := range map[string]os.FileMode{dir: 0o700, out: 0o600} {
		fi, err := os.Lstat(env.cluster.Path(p))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if fi.Mode().Perm() != want || fi.IsDir() != (p == dir) {
			t.Errorf("%s: %v, want mode %v", p, fi.Mode(), want)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 2001 {
			t.Errorf("%s is owned by uid %d, want alice (2001)", p, st.Uid)
		}
	}
	stdout, errOut, code := trainyardCLI("logs", tj.Name, "-n", tenant)
	if code != 0 || !strings.Contains(stdout, "ran in "+dir+"\n") || !strings.Contains(stdout, ".err <==\nwarn\n") {
		t.Fatalf("logs: exit %d, stdout %q, stderr %q; want the job's output from %s", code, stdout, errOut, dir)
	}
	if got, err := env.cluster.ExecAs(ctx, "bob", "ls", dir); err == nil {
		t.Errorf("bob listed alice's work directory: %q", got)
	}

	// The next job finds the directory: no job makes it again.
	jobsBefore := workDirJobs(t)
	if jobsBefore == 0 {
		t.Errorf("accounting shows no job that made the work directory; want the first job's")
	}
	tj2 := submit(t, trainJob("home-again", "home-slurm", 1, 1, "true"))
	dispatchOf(t, tj2, phaseIs(v1alpha1.DispatchSucceeded))
	if n := workDirJobs(t); n != jobsBefore {
		t.Errorf("%d jobs made the work directory after the second job, %d before; want no new one", n, jobsBefore)
	}
}

// setWorkDir sets the Target's spec.slurm.workDir and waits until its
// agent has acted on the change.
func setWorkDir(t *testing.T, dir string) {
	t.Helper()
	ctx := context.Background()
	g := NewWithT(t)
	var tg v1alpha1.Target
	g.Expect(env.fleet.Hub.Client.Get(ctx, client.ObjectKey{Name: targetName}, &tg)).To(Succeed())
	patch := client.MergeFrom(tg.DeepCopy())
	tg.Spec.Slurm.WorkDir = dir
	g.Expect(env.fleet.Hub.Client.Patch(ctx, &tg, patch)).To(Succeed())
	g.Eventually(func(g Gomega) {
		var cur v1alpha1.Target
		g.Expect(env.fleet.Hub.Client.Get(ctx, client.ObjectKey{Name: targetName}, &cur)).To(Succeed())
		g.Expect(cur.Status.ObservedGeneration).To(Equal(cur.Generation))
	}, 30*time.Second, util.Interval).Should(Succeed())
	time.Sleep(2 * time.Second) // the agent's Target cache, which submits read
}

// workDirJobs counts the jobs accounting recorded that made a work
// directory.
func workDirJobs(t *testing.T) int {
	t.Helper()
	return len(accountedJobs(NewWithT(t), func(comment string) bool { return strings.HasPrefix(comment, slurm.WorkDirCommentPrefix) }))
}

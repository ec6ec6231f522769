package slurmdispatch

import (
	"context"
	"os"
	"path"
	"strings"
	"syscall"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// TestOutputIsPrivateToTheMappedUser: a job's work directory is 0700 and
// its output 0600, owned by the mapped user, so another user of the cluster
// can neither list nor read them; the job's private directories (the MPI
// hostfile's, the status credential's) are gone once the job ends.
func TestOutputIsPrivateToTheMappedUser(t *testing.T) {
	makeRuntime(t, "private-slurm", tytesting.TorchRuntimeSpec(1))
	tj := submit(t, trainJob("private", "private-slurm", 1, 1, "bash", "-c", "echo secret-of-alice; echo err >&2; touch made-by-job"))
	d := dispatchOf(t, tj, phaseIs(v1alpha1.DispatchSucceeded))
	out := outputPath(d, slurmUser)
	dir := path.Dir(out)
	for p, want := range map[string]os.FileMode{dir: 0o700, out: 0o600, strings.TrimSuffix(out, ".out") + ".err": 0o600, dir + "/made-by-job": 0o600} {
		fi, err := os.Lstat(env.cluster.Path(p))
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %v, want %v", p, fi.Mode().Perm(), want)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 2001 {
			t.Errorf("%s is owned by uid %d, want alice (2001)", p, st.Uid)
		}
	}
	if !strings.Contains(output(t, d), "secret-of-alice") {
		t.Fatalf("output lacks the job's line")
	}
	ctx := context.Background()
	for _, args := range [][]string{{"cat", out}, {"ls", dir}, {"cat", dir + "/made-by-job"}} {
		if got, err := env.cluster.ExecAs(ctx, "bob", args...); err == nil || strings.Contains(string(got), "secret-of-alice") {
			t.Errorf("bob ran %q: %v, %q; want permission denied", args, err, got)
		}
	}
	if left, _ := os.ReadDir(env.cluster.Path(dir)); len(left) > 0 {
		for _, e := range left {
			// Other tests' killed jobs may leave theirs to the retention sweep.
			if strings.HasPrefix(e.Name(), ".trainyard-job."+d.Status.Remote.ID+".") {
				t.Errorf("private job directory %s left behind", e.Name())
			}
		}
	}
}

// TestSpankOptionEnvIsRefused: a tenant variable that would set a SPANK
// plugin's option (or any Slurm-read variable) never reaches Slurm: no
// target can run the job, and the check says why.
func TestSpankOptionEnvIsRefused(t *testing.T) {
	g := NewWithT(t)
	ctx, c := context.Background(), env.fleet.Hub.Client
	makeRuntime(t, "spank-slurm", tytesting.TorchRuntimeSpec(1))
	tj := trainJob("spank", "spank-slurm", 1, 1, "true")
	tj.Spec.Trainer.Env = []corev1.EnvVar{{Name: "_SLURM_SPANK_OPTION_x", Value: "1"}}
	tj = submit(t, tj)
	wl := util.WorkloadOf(g, c, tj)
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(wl), wl)).To(Succeed())
		g.Expect(util.WorkloadEnded(wl)).To(BeTrue(), "conditions %v", wl.Status.Conditions)
		var events corev1.EventList
		g.Expect(c.List(ctx, &events, client.InNamespace(wl.Namespace))).To(Succeed())
		var msgs []string
		for _, e := range events.Items {
			if e.InvolvedObject.UID == wl.UID {
				msgs = append(msgs, e.Message)
			}
		}
		g.Expect(msgs).To(ContainElement(ContainSubstring("_SLURM_SPANK_OPTION_x is reserved")))
	}, slurmTimeout, util.Interval).Should(Succeed())
	jobs, err := env.rest.Jobs(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	for _, j := range jobs {
		g.Expect(j.Name).NotTo(HavePrefix(tj.Name+"-"), "a Slurm job was made for %s", tj.Name)
	}
}

package slurm

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
)

// TestRenderRefusesSlurmSteeringEnv: a tenant variable Slurm, slurmstepd,
// a SPANK plugin, PMI or the loader would read is refused at render.
func TestRenderRefusesSlurmSteeringEnv(t *testing.T) {
	for _, name := range []string{
		"_SLURM_SPANK_OPTION_x", "_SLURM_SPANK_OPTION_pyxis_container_image", "SPANK_x", "_SPANK_x",
		"SLURMD_NODENAME", "SLURM_UMASK", "SLURM_CONF", "slurm_conf", "SCRUN_ROOT",
		"PMI_RANK", "PRTE_MCA_plm_rsh_agent", "LD_BIND_NOW", "TRAINYARD_WORKDIR", "TRAINYARD_RETENTION_DAYS",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Render(dispatch(caseSpec{tj: withEnv(corev1.EnvVar{Name: name, Value: "1"})}), target().Obj())
			if !errors.Is(err, backends.ErrRejected) || !strings.Contains(err.Error(), name+" is reserved") {
				t.Fatalf("err = %v, want ErrRejected saying %s is reserved", err, name)
			}
		})
	}
	for _, name := range []string{"MY_SLURM_JOB", "SPANKY", "OMPI_COMM_WORLD_SIZE_HINT", "LDFLAGS"} {
		if err := ValidEnvName(name); err != nil {
			t.Errorf("ValidEnvName(%s) = %v, want nil", name, err)
		}
	}
}

func TestWorkDir(t *testing.T) {
	cases := map[string]struct {
		template, user, want, wantErr string
	}{
		"unset: in the user's home":      {template: "", user: "alice", want: "/home/alice/.trainyard"},
		"per user":                       {template: "/scratch/%u/trainyard", user: "alice", want: "/scratch/alice/trainyard"},
		"twice":                          {template: "/fs/%u/jobs-%u", user: "bob", want: "/fs/bob/jobs-bob"},
		"trailing slash":                 {template: "/scratch/%u/", user: "alice", want: "/scratch/alice"},
		"no placeholder: the user's own": {template: "/shared/trainyard", user: "alice", want: "/shared/trainyard/alice"},
		"no placeholder, trailing slash": {template: "/shared/", user: "alice", want: "/shared/alice"},
		"relative":                       {template: "scratch/%u", user: "alice", wantErr: "clean absolute path"},
		"climbing":                       {template: "/scratch/%u/../root", user: "alice", wantErr: "clean absolute path"},
		"double slash":                   {template: "/scratch//%u", user: "alice", wantErr: "clean absolute path"},
		"the root: the user's own below": {template: "/", user: "alice", want: "/alice"},
		"another placeholder":            {template: "/scratch/%j", user: "alice", wantErr: "clean absolute path"},
		"a user that climbs":             {template: "/scratch/%u", user: "..", wantErr: "not a valid Unix user"},
		"a user with a slash":            {template: "/scratch/%u", user: "a/b", wantErr: "not a valid Unix user"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := WorkDir(&v1alpha1.SlurmTarget{WorkDir: tc.template}, tc.user)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("WorkDir = %q, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("WorkDir = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestRenderJobFiles: the job runs in the user's work directory with the
// retention and a 077 umask for slurmstepd's output files.
func TestRenderJobFiles(t *testing.T) {
	tg := target().Obj()
	tg.Spec.Slurm.WorkDir = "/scratch/%u/trainyard"
	tg.Spec.Slurm.OutputRetentionDays = ptr.To[int32](3)
	j, err := Render(dispatch(caseSpec{}), tg)
	if err != nil {
		t.Fatal(err)
	}
	want := "/scratch/" + j.User + "/trainyard"
	if j.WorkDir != want {
		t.Errorf("WorkDir = %q, want %q", j.WorkDir, want)
	}
	for _, e := range []string{"SLURM_UMASK=0077", EnvWorkDir + "=" + want, EnvRetentionDays + "=3"} {
		if !containsString(j.Env, e) {
			t.Errorf("env %q lacks %q", j.Env, e)
		}
	}
	j, err = Render(dispatch(caseSpec{}), target().Obj())
	if err != nil {
		t.Fatal(err)
	}
	home := "/home/" + j.User + "/.trainyard"
	if j.WorkDir != home || !containsString(j.Env, EnvWorkDir+"="+home) || !containsString(j.Env, EnvRetentionDays+"=7") {
		t.Errorf("without workDir: WorkDir %q env %q, want %s and 7 days", j.WorkDir, j.Env, home)
	}
}

func containsString(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// TestScriptRetention runs a launcher script's header in a work directory
// holding old and new output: only the user's trainyard output and job
// directories past the retention go.
func TestScriptRetention(t *testing.T) {
	bash := requireBash(t)
	work := filepath.Join(t.TempDir(), "work")
	outside := filepath.Join(t.TempDir(), "outside.out")
	old := time.Now().Add(-4 * 24 * time.Hour)
	files := map[string]bool{ // name: removed
		"train-0123456789ab-a1.41.out": true,
		"train-0123456789ab-a1.41.err": true,
		".trainyard-job.41.AbCdEfGh":   true,
		"train-0123456789ab-a2.57.out": false, // new
		"notes.txt":                    false, // not trainyard's
		"link-a1.42.out":               false, // a symlink: never followed, kept
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(outside, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		p := filepath.Join(work, name)
		var err error
		switch {
		case strings.HasPrefix(name, ".trainyard-job."):
			err = os.Mkdir(p, 0o700)
		case strings.HasPrefix(name, "link-"):
			err = os.Symlink(outside, p)
		default:
			err = os.WriteFile(p, []byte("x"), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
		if name != "train-0123456789ab-a2.57.out" && !strings.HasPrefix(name, "link-") {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	cmd := exec.Command(bash, "-c", scriptHeader)
	cmd.Env = []string{"PATH=/usr/bin:/bin", EnvWorkDir + "=" + work, EnvRetentionDays + "=3",
		"SLURM_JOB_NAME=train-0123456789ab-a2", "SLURM_JOB_ID=57"}
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("header: %v\n%s", err, b)
	}
	for name, removed := range files {
		_, err := os.Lstat(filepath.Join(work, name))
		if gone := os.IsNotExist(err); gone != removed {
			t.Errorf("%s: removed = %v, want %v", name, gone, removed)
		}
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("the symlink's target was touched: %v", err)
	}
	if fi, _ := os.Stat(filepath.Join(work, "train-0123456789ab-a2.57.out")); fi == nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the job's own output is not 0600: %v", fi)
	}
	if fi, _ := os.Stat(work); fi == nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the work dir is not 0700: %v", fi)
	}
}

// TestMPIScriptExitStatus: the MPI launcher, which no longer execs its
// ranks, still fails with the program's status, and its private directory
// goes either way.
func TestMPIScriptExitStatus(t *testing.T) {
	bash := requireBash(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"scontrol": stubScontrol, "failprog": "#!/bin/bash\nexit 3\n"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	enc, err := EncodeArgv([]string{"failprog"})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bash, "-c", mpiScript)
	cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", EnvArgv + "=" + enc, EnvMPIStarter + "=mpirun", EnvWorkDir + "=" + dir,
		"SLURM_JOB_NODELIST=n[1-2]", "SLURM_JOB_ID=9"}
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("script: %v, want exit status 3", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".trainyard-job.*")); len(left) != 0 {
		t.Errorf("private directory left behind: %v", left)
	}
}

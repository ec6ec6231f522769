package slurm

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

// Stand-ins for what a container site has on its nodes. Each records its
// argv (NUL-terminated) in $OUT.<name>, then does the least the launcher
// needs: srun and apptainer run what follows their options, skopeo makes
// the layout, umoci a bundle whose config.json is laid out as umoci's.
const (
	standInSrun = `#!/bin/bash
printf "%s\0" "$@" > "$OUT.srun"
while (($#)); do
  case "$1" in
  --container=*) b="${1#--container=}"; [[ -f "$b/config.json" && -d "$b/rootfs" ]] || exit 7; cp "$b/config.json" "$OUT.config" ;;
  --) shift; break ;;
  esac
  shift
done
export SLURM_NODEID=0
exec "$@"
`
	standInApptainer = `#!/bin/bash
printf "%s\0" "$@" > "$OUT.apptainer"
[[ "$1" == exec ]] || exit 8
shift
while (($#)); do case "$1" in docker://*) shift; break ;; *) shift ;; esac; done
exec "$@"
`
	standInSkopeo = `#!/bin/bash
printf "%s\0" "$@" > "$OUT.skopeo"
[[ -z "${SKOPEO_FAIL:-}" ]] || { echo "skopeo: manifest unknown" >&2; exit 1; }
dst="${!#}"; dst="${dst#oci:}"; mkdir -p "${dst%:*}"
`
	standInUmoci = `#!/bin/bash
printf "%s\0" "$@" > "$OUT.umoci"
b="${!#}"; mkdir -p "$b/rootfs"
printf '{\n\t"ociVersion": "1.0.0",\n\t"mounts": [\n\t\t{\n\t\t\t"destination": "/proc"\n\t\t}\n\t]\n}' > "$b/config.json"
`
)

// containerTask as one argument, the way bash gets it.
var taskArg = strings.TrimSuffix(strings.TrimPrefix(strings.SplitN(containerTask, "' trainyard", 2)[0], "/bin/sh -c '"), "\n")

// TestContainerLaunchersArgv runs each container launcher's script under
// bash with stand-in srun, apptainer, skopeo and umoci, a hostile argv and
// a hostile TRAINYARD_IMAGE (one Render would refuse, set here directly),
// and checks every command gets exactly the argv the runtime's docs ask
// for, each tenant value one argument, and nothing ran.
func TestContainerLaunchersArgv(t *testing.T) {
	bash := requireBash(t)
	mpi := tytesting.TorchRuntimeSpec(2)
	mpi.MLPolicy.MLPolicySource = trainer.MLPolicySource{MPI: &trainer.MPIMLPolicySource{}}
	for _, tc := range []struct {
		rt       v1alpha1.ContainerRuntime
		mpi      bool
		tool     string // the stand-in whose argv is checked
		wantArgv []string
	}{
		{rt: v1alpha1.ContainerRuntimeOCI, tool: "srun", wantArgv: []string{"--nodes=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1", "--container=WORK/.trainyard-job.7.XXXXXXXX/bundle", "--", "/bin/sh", "-c", taskArg, "trainyard"}},
		{rt: v1alpha1.ContainerRuntimeOCI, tool: "skopeo", wantArgv: []string{"copy", "--quiet", "--", "docker://IMAGE", "oci:WORK/.trainyard-job.7.XXXXXXXX/image:job"}},
		{rt: v1alpha1.ContainerRuntimeOCI, tool: "umoci", wantArgv: []string{"unpack", "--rootless", "--image", "WORK/.trainyard-job.7.XXXXXXXX/image:job", "WORK/.trainyard-job.7.XXXXXXXX/bundle"}},
		{rt: v1alpha1.ContainerRuntimePyxis, tool: "srun", wantArgv: []string{"--nodes=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1", "--container-image=IMAGE", "--container-mounts=WORK:WORK,/datasets:/data:ro", "--", "/bin/sh", "-c", taskArg, "trainyard"}},
		{rt: v1alpha1.ContainerRuntimePyxis, mpi: true, tool: "srun", wantArgv: []string{"--mpi=pmix", "--container-image=IMAGE", "--container-mounts=WORK:WORK,/datasets:/data:ro", "--"}},
		{rt: v1alpha1.ContainerRuntimeApptainer, tool: "srun", wantArgv: []string{"--nodes=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1", "--", "apptainer", "exec", "--bind=WORK:WORK,/datasets:/data:ro", "docker://IMAGE", "/bin/sh", "-c", taskArg, "trainyard"}},
		{rt: v1alpha1.ContainerRuntimeApptainer, tool: "apptainer", wantArgv: []string{"exec", "--bind=WORK:WORK,/datasets:/data:ro", "docker://IMAGE", "/bin/sh", "-c", taskArg, "trainyard"}},
		{rt: v1alpha1.ContainerRuntimeApptainer, mpi: true, tool: "apptainer", wantArgv: []string{"exec", "--bind=WORK:WORK,/datasets:/data:ro", "docker://IMAGE"}},
	} {
		name := string(tc.rt) + "-" + tc.tool
		if tc.mpi {
			name += "-mpi"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			marker := filepath.Join(dir, "pwned")
			hostileImage := "$(touch " + marker + "); touch " + marker + " --help"
			argv := append([]string{"trainprog"}, hostileArgs(marker)...)
			c := caseSpec{tj: imageJob("registry.example/img:1", argv...)}
			c.tj.Spec.Trainer.NumNodes = nil
			c.rt = tytesting.TorchRuntimeSpec(2)
			if tc.mpi {
				c.rt = mpi
			}
			tg := containerTarget(tc.rt)
			tg.Spec.Slurm.WorkDir = filepath.Join(dir, "work", "%u")
			j, err := Render(dispatch(c), tg)
			if err != nil {
				t.Fatal(err)
			}
			out, err := runContainerScript(t, bash, dir, j, EnvImage+"="+hostileImage)
			if err != nil {
				t.Fatalf("script: %v\n%s", err, out)
			}
			raw, err := os.ReadFile(filepath.Join(dir, "out."+tc.tool))
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
			var want []string
			for _, a := range tc.wantArgv {
				want = append(want, strings.NewReplacer("WORK", j.WorkDir, "IMAGE", hostileImage).Replace(a))
			}
			if tc.tool == "srun" || tc.tool == "apptainer" {
				want = append(want, argv...)
			}
			jobdir := regexp.MustCompile(`/\.trainyard-job\.7\.[A-Za-z0-9]{8}/`)
			for i := range got {
				got[i] = jobdir.ReplaceAllString(got[i], "/.trainyard-job.7.XXXXXXXX/")
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s argv:\n got %q\nwant %q", tc.tool, got, want)
			}
			prog, err := os.ReadFile(filepath.Join(dir, "out"))
			if err != nil {
				t.Fatalf("the tenant program did not run: %v\n%s", err, out)
			}
			if got := strings.Split(strings.TrimSuffix(string(prog), "\x00"), "\x00"); !reflect.DeepEqual(got, argv[1:]) {
				t.Errorf("program argv differs:\n got %q\nwant %q", got, argv[1:])
			}
			if _, err := os.Stat(marker); err == nil {
				t.Error("a hostile image, argument or env value ran a command")
			}
			if left, _ := filepath.Glob(filepath.Join(j.WorkDir, ".trainyard-job.*")); len(left) != 0 {
				t.Errorf("the job's private directory outlived it: %v", left)
			}
		})
	}
}

// TestOCIBundleMountsAndFailure: the OCI launcher adds the mounts to the
// bundle's config.json, and a pull that fails ends the job with
// ExitImageUnavailable and says which image, before any step runs.
func TestOCIBundleMountsAndFailure(t *testing.T) {
	bash := requireBash(t)
	dir := t.TempDir()
	tg := containerTarget(v1alpha1.ContainerRuntimeOCI)
	tg.Spec.Slurm.WorkDir = filepath.Join(dir, "work", "%u")
	j, err := Render(dispatch(caseSpec{tj: imageJob("127.0.0.1:5000/t/job:v1", "trainprog")}), tg)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := runContainerScript(t, bash, dir, j); err != nil {
		t.Fatalf("script: %v\n%s", err, out)
	}
	config, err := os.ReadFile(filepath.Join(dir, "out.config"))
	if err != nil {
		t.Fatal(err)
	}
	mounts, _ := envValue(j.Env, EnvContainerMounts)
	if !strings.Contains(string(config), `"mounts": [`+mounts+"\n") || !strings.Contains(string(config), `"destination": "/proc"`) {
		t.Errorf("config.json lacks the mounts before umoci's own:\n%s", config)
	}

	out, err := runContainerScript(t, bash, dir, j, "SKOPEO_FAIL=1")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != ExitImageUnavailable {
		t.Fatalf("exit = %v, want %d\n%s", err, ExitImageUnavailable, out)
	}
	if !strings.Contains(string(out), "trainyard: cannot pull or unpack the image 127.0.0.1:5000/t/job:v1") {
		t.Errorf("no reason in the job's error output:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "out.srun")); err == nil {
		t.Error("srun ran after the image could not be pulled")
	}
}

// runContainerScript runs j's script as the batch step would, with the
// stand-ins first on PATH; extra env entries override the job's.
func runContainerScript(t *testing.T, bash, dir string, j *Job, extra ...string) ([]byte, error) {
	t.Helper()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(j.WorkDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"srun": standInSrun, "apptainer": standInApptainer, "skopeo": standInSkopeo,
		"umoci": standInUmoci, "scontrol": stubScontrol, "trainprog": stubProg} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script := filepath.Join(dir, "job.sh")
	if err := os.WriteFile(script, []byte(j.Script), 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(filepath.Join(dir, "out.srun"))
	cmd := exec.Command(bash, script)
	cmd.Dir = dir
	cmd.Env = append(append([]string{
		"PATH=" + bin + ":/usr/bin:/bin", "OUT=" + filepath.Join(dir, "out"), "TMPDIR=" + dir,
		"SLURM_JOB_NUM_NODES=2", "SLURM_JOB_NODELIST=n[1-2]", "SLURM_JOB_ID=7", "SLURMD_NODENAME=n1",
	}, j.Env...), extra...)
	return cmd.CombinedOutput()
}

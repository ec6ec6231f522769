package slurm

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

func target() *tytesting.TargetWrapper {
	return tytesting.MakeSlurmTarget("hpc", "a100", "gpu").
		SlurmPartition("cpu", "batch").
		SlurmAccount(v1alpha1.SlurmAccount{Namespace: "team-a", User: "svc_a", Account: "proj-a", QOS: "high"}).
		SlurmAccount(v1alpha1.SlurmAccount{Namespace: "team-b", User: "svc_b"}).
		SlurmLaunchers(v1alpha1.LauncherTorchrun, v1alpha1.LauncherMPI, v1alpha1.LauncherFlux).
		// The test runtimes' images, as a site's module environment
		// would stand for them.
		HostImages("docker.io/pytorch/pytorch:*", "mpioperator/*")
}

type caseSpec struct {
	tj      *trainer.TrainJob
	rt      trainer.TrainingRuntimeSpec
	flavors map[string]string
	ns      string
}

func dispatch(c caseSpec) *v1alpha1.Dispatch {
	if c.tj == nil {
		c.tj = tytesting.MakeTrainJob("train", "team-a").Obj()
	}
	if c.rt.Template.Spec.ReplicatedJobs == nil {
		c.rt = tytesting.TorchRuntimeSpec(1)
	}
	if c.flavors == nil {
		c.flavors = map[string]string{"nvidia.com/gpu": "a100"}
	}
	w := tytesting.MakeDispatch("d1", "trainyard-system", "hpc").
		SnapshotTrainJob(c.tj).
		SnapshotRuntime(v1alpha1.RuntimeKindClusterTrainingRuntime, "rt", c.rt).
		PodSets(v1alpha1.PodSetPlacement{Name: "node", Count: 2, Flavors: c.flavors}).
		Attempt(3)
	if c.ns != "" {
		w.Spec.Workload.Namespace = c.ns
	}
	return w.Obj()
}

func nodeCtr(spec *trainer.TrainingRuntimeSpec) *corev1.Container {
	return &spec.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0]
}

func withEnv(env ...corev1.EnvVar) *trainer.TrainJob {
	tj := tytesting.MakeTrainJob("train", "team-a").Obj()
	tj.Spec.Trainer = &trainer.Trainer{Env: env}
	return tj
}

func envValue(env []string, name string) (string, bool) {
	for _, e := range env {
		if k, v, _ := strings.Cut(e, "="); k == name {
			return v, true
		}
	}
	return "", false
}

func TestRender(t *testing.T) {
	mpiRuntime := tytesting.TorchRuntimeSpec(1)
	mpiRuntime.MLPolicy = &trainer.MLPolicy{NumNodes: ptr.To[int32](3), MLPolicySource: trainer.MLPolicySource{MPI: &trainer.MPIMLPolicySource{NumProcPerNode: ptr.To[int32](8)}}}
	nodeCtr(&mpiRuntime).Command = []string{"/usr/bin/mpirun", "python", "x.py"}
	fluxRuntime := tytesting.TorchRuntimeSpec(1)
	fluxRuntime.MLPolicy = &trainer.MLPolicy{MLPolicySource: trainer.MLPolicySource{Flux: &trainer.FluxMLPolicySource{}}}
	noPolicy := tytesting.TorchRuntimeSpec(1)
	noPolicy.MLPolicy = nil
	gpuRuntime := tytesting.TorchRuntimeSpec(2)
	nodeCtr(&gpuRuntime).Resources.Limits = corev1.ResourceList{GPUResource: resource.MustParse("4")}
	nodeCtr(&gpuRuntime).Env = []corev1.EnvVar{{Name: "A", Value: "runtime"}, {Name: "B", Value: "runtime"}}
	nodeCtr(&gpuRuntime).Args = []string{"--runtime-arg"}
	valueFromRuntime := tytesting.TorchRuntimeSpec(1)
	nodeCtr(&valueFromRuntime).Env = []corev1.EnvVar{{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}}}

	tests := []struct {
		name    string
		c       caseSpec
		target  *v1alpha1.Target
		want    func(t *testing.T, j *Job)
		wantErr string
	}{
		{
			name: "defaults from runtime",
			c:    caseSpec{rt: gpuRuntime},
			want: func(t *testing.T, j *Job) {
				if j.Nodes != 2 || j.GPUsPerNode != 4 || j.TasksPerNode != 1 {
					t.Errorf("nodes/gpus/tasks = %d/%d/%d, want 2/4/1", j.Nodes, j.GPUsPerNode, j.TasksPerNode)
				}
				if j.Partition != "gpu" || j.Account != "proj-a" || j.QOS != "high" || j.User != "svc_a" {
					t.Errorf("identity = %s/%s/%s/%s", j.Partition, j.Account, j.QOS, j.User)
				}
				if j.Launcher != v1alpha1.LauncherTorchrun || j.Script != torchrunScript {
					t.Errorf("launcher = %s", j.Launcher)
				}
				if v, _ := envValue(j.Env, EnvNprocPerNode); v != "4" {
					t.Errorf("nproc = %q, want 4", v)
				}
				argv := mustDecode(t, j.Env)
				if !reflect.DeepEqual(argv, []string{"torchrun", "train.py", "--runtime-arg"}) {
					t.Errorf("argv = %q", argv)
				}
				if !slices.Contains(j.Env, "A=runtime") || !slices.Contains(j.Env, "B=runtime") {
					t.Errorf("env = %q", j.Env)
				}
			},
		},
		{
			name: "trainer overrides",
			c: caseSpec{rt: gpuRuntime, tj: func() *trainer.TrainJob {
				w := tytesting.MakeTrainJob("train", "team-a").NumNodes(5).GPUsPerNode(8).Command([]string{"python", "-m", "t"}, "--lr", "0.1")
				w.Spec.Trainer.Env = []corev1.EnvVar{{Name: "B", Value: "trainer"}, {Name: "C", Value: "x=y\nz"}}
				w.Spec.ActiveDeadlineSeconds = 61
				return w.Obj()
			}()},
			want: func(t *testing.T, j *Job) {
				if j.Nodes != 5 || j.GPUsPerNode != 8 || j.TimeLimitMinutes != 2 {
					t.Errorf("nodes/gpus/minutes = %d/%d/%d", j.Nodes, j.GPUsPerNode, j.TimeLimitMinutes)
				}
				if argv := mustDecode(t, j.Env); !reflect.DeepEqual(argv, []string{"python", "-m", "t", "--lr", "0.1"}) {
					t.Errorf("argv = %q", argv)
				}
				var tenant []string
				for _, e := range j.Env {
					if !strings.HasPrefix(e, "TRAINYARD_") && !strings.HasPrefix(e, "SLURM_UMASK=") {
						tenant = append(tenant, e)
					}
				}
				if want := []string{"A=runtime", "B=trainer", "C=x=y\nz"}; !reflect.DeepEqual(tenant, want) {
					t.Errorf("tenant env = %q, want %q", tenant, want)
				}
			},
		},
		{
			name: "name and comment",
			c:    caseSpec{},
			want: func(t *testing.T, j *Job) {
				d := dispatch(caseSpec{})
				if j.Name != backends.RemoteName(d) {
					t.Errorf("name = %q", j.Name)
				}
				if want := "trainyard:hpc/trainyard-system/d1/attempt=3/uid=uid-d1"; j.Comment != want {
					t.Errorf("comment = %q, want %q", j.Comment, want)
				}
				target, w, ok := ParseComment(j.Comment)
				if !ok || target != "hpc" || w.DispatchNamespace != "trainyard-system" || w.DispatchName != "d1" || w.Attempt != 3 {
					t.Errorf("ParseComment(%q) = %q, %+v, %v", j.Comment, target, w, ok)
				}
			},
		},
		{
			name: "cpu flavor partition and account without qos",
			c:    caseSpec{flavors: map[string]string{"cpu": "cpu", "memory": "cpu"}, ns: "team-b"},
			want: func(t *testing.T, j *Job) {
				if j.Partition != "batch" || j.User != "svc_b" || j.Account != "" || j.QOS != "" {
					t.Errorf("identity = %s/%s/%s/%s", j.Partition, j.User, j.Account, j.QOS)
				}
			},
		},
		{
			name: "mpi launcher with mpirun starter",
			c:    caseSpec{rt: mpiRuntime},
			want: func(t *testing.T, j *Job) {
				if j.Launcher != v1alpha1.LauncherMPI || j.Script != mpiScript || j.Nodes != 3 || j.TasksPerNode != 8 {
					t.Errorf("launcher/nodes/tasks = %s/%d/%d", j.Launcher, j.Nodes, j.TasksPerNode)
				}
				if v, _ := envValue(j.Env, EnvMPIStarter); v != MPIStarterMpirun {
					t.Errorf("starter = %q", v)
				}
			},
		},
		{
			name: "mpi launcher with srun starter",
			c:    caseSpec{rt: mpiRuntime, tj: tytesting.MakeTrainJob("train", "team-a").Command([]string{"python"}, "x.py").Obj()},
			want: func(t *testing.T, j *Job) {
				if v, _ := envValue(j.Env, EnvMPIStarter); v != MPIStarterSrun {
					t.Errorf("starter = %q", v)
				}
			},
		},
		{
			name: "flux launcher",
			c:    caseSpec{rt: fluxRuntime},
			want: func(t *testing.T, j *Job) {
				if j.Launcher != v1alpha1.LauncherFlux || j.Script != fluxScript {
					t.Errorf("launcher = %s", j.Launcher)
				}
			},
		},
		{
			name: "default launcher from target",
			c:    caseSpec{rt: noPolicy},
			target: func() *v1alpha1.Target {
				tg := target().Obj()
				tg.Spec.Slurm.DefaultLauncher = v1alpha1.LauncherMPI
				return tg
			}(),
			want: func(t *testing.T, j *Job) {
				if j.Launcher != v1alpha1.LauncherMPI {
					t.Errorf("launcher = %s", j.Launcher)
				}
			},
		},
		{name: "namespace not listed", c: caseSpec{ns: "team-z"}, wantErr: "namespace team-z may not use this cluster"},
		{name: "flavor without partition", c: caseSpec{flavors: map[string]string{"nvidia.com/gpu": "h100"}}, wantErr: `flavor "h100" has no partition`},
		{name: "flavors on two partitions", c: caseSpec{flavors: map[string]string{"nvidia.com/gpu": "a100", "cpu": "cpu"}}, wantErr: "different partitions"},
		{name: "valueFrom", c: caseSpec{rt: valueFromRuntime}, wantErr: "env TOKEN uses valueFrom"},
		{name: "bad env name", c: caseSpec{tj: withEnv(corev1.EnvVar{Name: "A;B", Value: "1"})}, wantErr: "not a valid variable name"},
		{name: "env name with dash", c: caseSpec{tj: withEnv(corev1.EnvVar{Name: "A-B", Value: "1"})}, wantErr: "not a valid variable name"},
		{name: "SLURM env", c: caseSpec{tj: withEnv(corev1.EnvVar{Name: "SLURM_ACCOUNT", Value: "other"})}, wantErr: "SLURM_ACCOUNT is reserved"},
		{name: "SRUN env", c: caseSpec{tj: withEnv(corev1.EnvVar{Name: "SRUN_EXPORT_ENV", Value: "x"})}, wantErr: "SRUN_EXPORT_ENV is reserved"},
		{name: "TRAINYARD env", c: caseSpec{tj: withEnv(corev1.EnvVar{Name: "TRAINYARD_ARGV", Value: "x"})}, wantErr: "TRAINYARD_ARGV is reserved"},
		{name: "PMIX env", c: caseSpec{tj: withEnv(corev1.EnvVar{Name: "PMIX_MCA_x", Value: "x"})}, wantErr: "reserved"},
		{name: "OMPI_MCA env", c: caseSpec{tj: withEnv(corev1.EnvVar{Name: "OMPI_MCA_plm", Value: "x"})}, wantErr: "reserved"},
		{name: "BASH_ENV", c: caseSpec{tj: withEnv(corev1.EnvVar{Name: "BASH_ENV", Value: "/tmp/x"})}, wantErr: "BASH_ENV is reserved"},
		{name: "LD_PRELOAD", c: caseSpec{tj: withEnv(corev1.EnvVar{Name: "LD_PRELOAD", Value: "/tmp/x.so"})}, wantErr: "LD_PRELOAD is reserved"},
		{name: "IFS", c: caseSpec{tj: withEnv(corev1.EnvVar{Name: "IFS", Value: "/"})}, wantErr: "IFS is reserved"},
		{name: "SHELLOPTS", c: caseSpec{tj: withEnv(corev1.EnvVar{Name: "SHELLOPTS", Value: "xtrace"})}, wantErr: "SHELLOPTS is reserved"},
		{name: "PET env", c: caseSpec{tj: withEnv(corev1.EnvVar{Name: "PET_MASTER_ADDR", Value: "evil"})}, wantErr: "PET_MASTER_ADDR is reserved"},
		{name: "command with leading dash", c: caseSpec{tj: tytesting.MakeTrainJob("t", "team-a").Command([]string{"--account=other", "python"}).Obj()}, wantErr: "may not start with a dash"},
		{name: "NUL in arg", c: caseSpec{tj: tytesting.MakeTrainJob("t", "team-a").Command([]string{"python"}, "a\x00b").Obj()}, wantErr: "NUL"},
		{name: "zero nodes", c: caseSpec{tj: tytesting.MakeTrainJob("t", "team-a").NumNodes(0).Obj()}, wantErr: "numNodes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tg := tc.target
			if tg == nil {
				tg = target().Obj()
			}
			j, err := Render(dispatch(tc.c), tg)
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, backends.ErrRejected) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want ErrRejected containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.want(t, j)
		})
	}
}

func mustDecode(t *testing.T, env []string) []string {
	t.Helper()
	enc, ok := envValue(env, EnvArgv)
	if !ok {
		t.Fatalf("no %s in env", EnvArgv)
	}
	argv, err := DecodeArgv(enc)
	if err != nil {
		t.Fatal(err)
	}
	return argv
}

// hostileArgs are arguments that would run code, split, glob or be read as
// options if any of them reached a shell or command line as text.
func hostileArgs(marker string) []string {
	return []string{
		"$(touch " + marker + ")", "`touch " + marker + "`", "; touch " + marker, "&& touch " + marker + " #",
		"a\nb", "\n", "'", `"`, `'"'"'`, "*", "/*", "?", "[a-z]*", "--account=evil", "-", "--",
		"ünï©ødé ✓", "", "", " ", "\t", "$HOME", "${IFS}", "\\", "$'\\x41'", "!!", "~", "a=b", "#SBATCH --qos=evil",
		"'; touch " + marker + "; '", "\x01\x7f\x1b[31m",
	}
}

func requireBash(t *testing.T) string {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not installed")
	}
	return bash
}

// TestArgvPreludeIsData runs the real bash decoder on hostile argv and checks
// each argument comes out byte for byte, and nothing ran.
func TestArgvPreludeIsData(t *testing.T) {
	bash := requireBash(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "pwned")
	// Raw bytes that are not UTF-8 cannot come through the API server's JSON,
	// but the decoder must keep them anyway.
	argv := append([]string{"prog", "\xff\xfe"}, hostileArgs(marker)...)
	enc, err := EncodeArgv(argv)
	if err != nil {
		t.Fatal(err)
	}
	script := scriptHeader + ArgvPrelude() + `printf "%s\0" "${argv[@]}"` + "\n"
	cmd := exec.Command(bash, "-c", script)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), EnvArgv + "=" + enc}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bash: %v", err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if !reflect.DeepEqual(got, argv) {
		t.Errorf("decoded argv differs:\n got %q\nwant %q", got, argv)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("a hostile argument ran a command")
	}
	if strings.Contains(ArgvPrelude(), "'") {
		t.Error("the prelude must not contain single quotes (it is embedded in bash -c '...')")
	}
}

// TestArgvPreludeRefuses checks the script stops on corrupt or dangerous input
// instead of running something.
func TestArgvPreludeRefuses(t *testing.T) {
	bash := requireBash(t)
	dash, _ := EncodeArgv([]string{"x"})
	dashArgv := "LS1ldmlsAA==" // "--evil\x00"
	for name, enc := range map[string]string{"not base64": "!!!not base64", "empty": "", "leading dash": dashArgv, "ok": dash} {
		cmd := exec.Command(bash, "-c", scriptHeader+ArgvPrelude()+`echo RAN`)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), EnvArgv + "=" + enc}
		out, err := cmd.CombinedOutput()
		ran := strings.Contains(string(out), "RAN")
		if name == "ok" {
			if err != nil || !ran {
				t.Errorf("%s: err=%v out=%s", name, err, out)
			}
			continue
		}
		if err == nil || ran {
			t.Errorf("%s: script went on: err=%v out=%s", name, err, out)
		}
	}
}

// TestScriptsNeverWaitOnAProcessSubstitution guards every launcher script
// against `wait "$!"` on a process substitution: bash 5.2 now and then
// answers 255 for one it has already reaped, and the job fails at start
// with no message (3 of 400 runs of the container launchers' test under
// load before the scripts stopped doing it). The scripts start no
// background job, so any `wait` in them is that.
func TestScriptsNeverWaitOnAProcessSubstitution(t *testing.T) {
	waits := regexp.MustCompile(`(^|[;&|\s])wait\b`)
	for _, rt := range []v1alpha1.ContainerRuntime{v1alpha1.ContainerRuntimeNone, v1alpha1.ContainerRuntimeOCI, v1alpha1.ContainerRuntimePyxis, v1alpha1.ContainerRuntimeApptainer} {
		for _, l := range []v1alpha1.Launcher{v1alpha1.LauncherTorchrun, v1alpha1.LauncherMPI, v1alpha1.LauncherFlux} {
			script := ScriptFor(rt, l)
			if script == "" {
				continue
			}
			for i, line := range strings.Split(script, "\n") {
				if waits.MatchString(line) {
					t.Errorf("%s/%s line %d waits: %s", rt, l, i+1, line)
				}
			}
		}
	}
}

const stubSrun = `#!/bin/bash
while (($#)); do case "$1" in --) shift; break;; -*) shift;; *) break;; esac; done
export SLURM_NODEID=0
exec "$@"
`

const stubScontrol = `#!/bin/bash
[[ "$1 $2" == "show hostnames" ]] || exit 9
printf "n1\nn2\n"
`

const stubFlux = `#!/bin/bash
case "$1" in
start) shift; exec "$@" ;;
run) shift; [[ "$1" == -N ]] || exit 9; shift 2; exec "$@" ;;
esac
exit 9
`

// stubProg stands for the tenant's program: it records its argv and the
// variables the launchers give it.
const stubProg = `#!/bin/bash
printf "%s\0" "$@" > "$OUT"
{ env | grep -E "^(PET_|TRAINYARD_HOSTFILE|EVIL)" | sed -E 's|(/\.trainyard-job\.7\.)[A-Za-z0-9]{8}/|\1XXXXXXXX/|' | sort; } > "$OUT.env"
if [[ -n "${TRAINYARD_HOSTFILE:-}" ]]; then cp "$TRAINYARD_HOSTFILE" "$OUT.hostfile"; stat -c %a "$(dirname "$TRAINYARD_HOSTFILE")" > "$OUT.hostdir"; fi
touch "$OUT.made"; stat -c %a "$OUT.made" > "$OUT.mode"
`

// TestLauncherScripts runs each launcher's full script under bash with stub
// srun, scontrol and flux, and checks the tenant program receives exactly
// the hostile argv and env, and that nothing else ran.
func TestLauncherScripts(t *testing.T) {
	bash := requireBash(t)
	for _, l := range []struct {
		launcher v1alpha1.Launcher
		argv0    string
		wantEnv  []string
	}{
		{v1alpha1.LauncherTorchrun, "trainprog", []string{"EVIL=$(touch MARK)", "PET_MASTER_ADDR=n1", "PET_MASTER_PORT=29507", "PET_NNODES=2", "PET_NODE_RANK=0", "PET_NPROC_PER_NODE=4"}},
		{v1alpha1.LauncherMPI, "trainprog", []string{"EVIL=$(touch MARK)", "TRAINYARD_HOSTFILE=WORK/.trainyard-job.7.XXXXXXXX/hostfile"}},
		{v1alpha1.LauncherMPI, "mpirun", []string{"EVIL=$(touch MARK)", "TRAINYARD_HOSTFILE=WORK/.trainyard-job.7.XXXXXXXX/hostfile"}},
		{v1alpha1.LauncherFlux, "trainprog", []string{"EVIL=$(touch MARK)"}},
	} {
		t.Run(string(l.launcher)+"-"+l.argv0, func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "bin")
			tmp := filepath.Join(dir, "tmp")
			work := filepath.Join(dir, "work", "u")
			if err := os.MkdirAll(work, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{bin, tmp} {
				if err := os.Mkdir(p, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for name, body := range map[string]string{"srun": stubSrun, "scontrol": stubScontrol, "flux": stubFlux, "trainprog": stubProg, "mpirun": stubProg} {
				if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			marker := filepath.Join(dir, "pwned")
			rt := tytesting.TorchRuntimeSpec(2)
			switch l.launcher {
			case v1alpha1.LauncherMPI:
				rt.MLPolicy.MLPolicySource = trainer.MLPolicySource{MPI: &trainer.MPIMLPolicySource{}}
			case v1alpha1.LauncherFlux:
				rt.MLPolicy.MLPolicySource = trainer.MLPolicySource{Flux: &trainer.FluxMLPolicySource{}}
			}
			argv := append([]string{l.argv0}, hostileArgs(marker)...)
			tj := tytesting.MakeTrainJob("train", "team-a").GPUsPerNode(4).Command(argv[:1], argv[1:]...).Obj()
			tj.Spec.Trainer.Env = []corev1.EnvVar{{Name: "EVIL", Value: "$(touch " + marker + ")"}}
			tgt := target().Obj()
			tgt.Spec.Slurm.WorkDir = filepath.Join(dir, "work", "%u")
			j, err := Render(dispatch(caseSpec{tj: tj, rt: rt}), tgt)
			if err != nil {
				t.Fatal(err)
			}
			if j.WorkDir != strings.ReplaceAll(tgt.Spec.Slurm.WorkDir, "%u", j.User) {
				t.Fatalf("work dir %q for user %q", j.WorkDir, j.User)
			}
			work = j.WorkDir
			if err := os.MkdirAll(work, 0o755); err != nil {
				t.Fatal(err)
			}
			if j.Launcher != l.launcher {
				t.Fatalf("launcher = %s", j.Launcher)
			}
			scriptPath := filepath.Join(dir, "job.sh")
			if err := os.WriteFile(scriptPath, []byte(j.Script), 0o755); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "out")
			cmd := exec.Command(bash, scriptPath)
			cmd.Dir = dir
			cmd.Env = append([]string{
				"PATH=" + bin + ":/usr/bin:/bin", "OUT=" + out, "TMPDIR=" + tmp,
				"SLURM_JOB_NUM_NODES=2", "SLURM_JOB_NODELIST=n[1-2]", "SLURM_JOB_ID=7", "SLURM_NTASKS_PER_NODE=4",
			}, j.Env...)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("script: %v\n%s", err, b)
			}
			raw, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00"); !reflect.DeepEqual(got, argv[1:]) {
				t.Errorf("program argv differs:\n got %q\nwant %q", got, argv[1:])
			}
			rawEnv, err := os.ReadFile(out + ".env")
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, e := range l.wantEnv {
				want = append(want, strings.NewReplacer("MARK", marker, "WORK", work).Replace(e))
			}
			if got := strings.Fields(strings.ReplaceAll(string(rawEnv), "touch ", "touch_")); !reflect.DeepEqual(got, strings.Fields(strings.ReplaceAll(strings.Join(want, "\n"), "touch ", "touch_"))) {
				t.Errorf("program env = %q, want %q", rawEnv, want)
			}
			if l.launcher == v1alpha1.LauncherMPI {
				hf, err := os.ReadFile(out + ".hostfile")
				if err != nil || string(hf) != "n1 slots=4\nn2 slots=4\n" {
					t.Errorf("hostfile = %q, %v", hf, err)
				}
				if mode, _ := os.ReadFile(out + ".hostdir"); strings.TrimSpace(string(mode)) != "700" {
					t.Errorf("the hostfile's directory has mode %q, want 700", mode)
				}
				if left, _ := filepath.Glob(filepath.Join(work, ".trainyard-job.*")); len(left) != 0 {
					t.Errorf("the job's private directory outlived it: %v", left)
				}
			}
			if mode, _ := os.ReadFile(out + ".mode"); strings.TrimSpace(string(mode)) != "600" {
				t.Errorf("a file the program made has mode %q, want 600 (umask 077)", mode)
			}
			if fi, err := os.Stat(work); err != nil || fi.Mode().Perm() != 0o700 {
				t.Errorf("work dir mode %v (%v), want 0700", fi.Mode().Perm(), err)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Error("a hostile argument or env value ran a command")
			}
		})
	}
}

func benignDispatch(argv0 string, args []string, envValue string) *v1alpha1.Dispatch {
	tj := tytesting.MakeTrainJob("train", "team-a").Command([]string{argv0}, args...).Obj()
	tj.Spec.Trainer.Env = []corev1.EnvVar{{Name: "USER_VALUE", Value: envValue}}
	return dispatch(caseSpec{tj: tj})
}

// FuzzRenderArgvIsData renders arbitrary argv and env values and checks no
// tenant text reaches the script and argv round-trips through TRAINYARD_ARGV.
func FuzzRenderArgvIsData(f *testing.F) {
	benign, err := Render(benignDispatch("python", []string{"train.py"}, "1"), target().Obj())
	if err != nil {
		f.Fatal(err)
	}
	for _, a := range hostileArgs("/tmp/x") {
		f.Add("python", a, a, a)
		f.Add(a, "x", "y", a)
	}
	f.Add("torchrun", "--nproc-per-node=8", "train.py", "")
	f.Fuzz(func(t *testing.T, argv0, a1, a2, ev string) {
		args := []string{a1, a2}
		if !utf8.ValidString(argv0) || !utf8.ValidString(a1) || !utf8.ValidString(a2) || !utf8.ValidString(ev) {
			t.Skip("the API server only stores UTF-8 strings")
		}
		j, err := Render(benignDispatch(argv0, args, ev), target().Obj())
		bad := argv0 == "" || strings.HasPrefix(argv0, "-") || strings.ContainsRune(argv0+a1+a2+ev, 0)
		if bad {
			if err == nil || !errors.Is(err, backends.ErrRejected) {
				t.Fatalf("err = %v, want ErrRejected", err)
			}
			return
		}
		if err != nil {
			if errors.Is(err, backends.ErrRejected) && strings.Contains(err.Error(), "too long") {
				return
			}
			t.Fatal(err)
		}
		if j.Script != benign.Script {
			t.Fatal("tenant input changed the script")
		}
		if got := mustDecode(t, j.Env); !reflect.DeepEqual(got, append([]string{argv0}, args...)) {
			t.Fatalf("argv round trip: got %q", got)
		}
		if v, _ := envValue(j.Env, "USER_VALUE"); v != ev {
			t.Fatalf("env value changed: %q", v)
		}
		for _, s := range []string{j.Name, j.Comment, j.Partition, j.Account, j.QOS, j.User, j.StdoutPath, j.StderrPath, j.WorkDir} {
			if (len(a1) > 3 && strings.Contains(s, a1)) || bytes.ContainsAny([]byte(s), "\n'\"`$;") {
				t.Fatalf("tenant text reached a job field: %q", s)
			}
		}
	})
}

// TestAssignedNodes: a job is pinned to the nodes placement chose only when
// the assignment goes down to nodes and binds; an advisory one (the job
// asked for no topology) leaves slurmctld to pick, so a freed slot on any
// node can take it.
func TestAssignedNodes(t *testing.T) {
	nodes := func(advisory bool, levels ...string) []v1alpha1.PodSetPlacement {
		ta := &v1alpha1.TopologyAssignment{Levels: levels, Advisory: advisory}
		for _, n := range []string{"n2", "n1"} {
			values := append(make([]string, 0, len(levels)), "s1")
			if len(levels) == 2 {
				values = append(values, n)
			}
			ta.Domains = append(ta.Domains, v1alpha1.TopologyDomainAssignment{Values: values, Count: 1})
		}
		return []v1alpha1.PodSetPlacement{{Name: "node", Count: 2, Topology: ta}}
	}
	for name, tc := range map[string]struct {
		podSets []v1alpha1.PodSetPlacement
		want    []string
	}{
		"no topology":           {podSets: []v1alpha1.PodSetPlacement{{Name: "node", Count: 2}}},
		"bound to nodes":        {podSets: nodes(false, "switch", HostnameLevel), want: []string{"n1", "n2"}},
		"advisory nodes":        {podSets: nodes(true, "switch", HostnameLevel)},
		"bound above the nodes": {podSets: nodes(false, "switch")},
	} {
		t.Run(name, func(t *testing.T) {
			if got := assignedNodes(tc.podSets); !slices.Equal(got, tc.want) {
				t.Errorf("assignedNodes = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestTorchPortSkipsOneInUse: the rendezvous port is 29500 plus the job id
// modulo 1000, unless something listens there on the first node (a job
// whose id is 1000 apart), and then the next free one.
func TestTorchPortSkipsOneInUse(t *testing.T) {
	bash := requireBash(t)
	const id = 4321
	own := 29500 + id%1000
	bin := t.TempDir()
	scontrol := "#!/bin/bash\nprintf '127.0.0.1\\nn2\\n'\n"
	if err := os.WriteFile(filepath.Join(bin, "scontrol"), []byte(scontrol), 0o755); err != nil {
		t.Fatal(err)
	}
	portOf := func() string {
		t.Helper()
		cmd := exec.Command(bash, "-c", "set -euo pipefail\n"+torchEnv+`printf "%s" "$PET_MASTER_PORT"`)
		cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "SLURM_JOB_ID=" + strconv.Itoa(id), "SLURM_JOB_NUM_NODES=2", "SLURM_JOB_NODELIST=x"}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("torch env: %v", err)
		}
		return string(out)
	}
	if got := portOf(); got != strconv.Itoa(own) {
		t.Fatalf("port with nothing listening = %s, want %d", got, own)
	}
	for p := own; p <= own+1; p++ {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Skipf("port %d is taken on this machine: %v", p, err)
		}
		defer l.Close()
	}
	if got := portOf(); got != strconv.Itoa(own+2) {
		t.Errorf("port with the job's own and the next in use = %s, want %d", got, own+2)
	}
}

// Package slurm renders trainyard Dispatches into Slurm batch jobs submitted
// through slurmrestd.
package slurm

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/kubeflow/trainer/v2/pkg/constants"
	corev1 "k8s.io/api/core/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
)

// GPUResource is the resource name counted as GPUs per node.
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// maxArgvBytes bounds TRAINYARD_ARGV: Linux refuses a single environment
// string longer than 128 KiB (MAX_ARG_STRLEN).
const maxArgvBytes = 96 << 10

// Job is a Slurm batch job, independent of the slurmrestd API version; the
// submit code maps it onto V0041/V0042JobDescMsg.
type Job struct {
	Name             string
	Comment          string
	Partition        string
	Account          string
	QOS              string
	User             string
	Nodes            int32
	TasksPerNode     int32
	GPUsPerNode      int64
	TimeLimitMinutes int64 // 0: the partition's default
	Env              []string
	WorkDir          string // the user's private job directory (WorkDir)
	StdoutPath       string
	StderrPath       string
	Script           string
	Launcher         v1alpha1.Launcher
	// Requeue lets Slurm requeue the job after a node failure or
	// preemption; set when the runtime allows restarts.
	Requeue bool
	// RequiredNodes pins the job to the nodes placement chose (empty: any).
	RequiredNodes []string
	// MaxSwitches bounds the leaf switches of the allocation (0: no bound).
	MaxSwitches int32
	// After holds the job until that job (the one that makes its work
	// directory, workdir.go) completed; slurmctld cancels it if that job
	// fails. 0: none.
	After int32
}

// CommentPrefix starts the comment of every job trainyard submits.
const CommentPrefix = "trainyard:"

// Comment is the job comment that identifies the target and Dispatch
// attempt, so an idempotent submit finds a job it already made and the
// fence finds jobs whose Dispatch is gone.
func Comment(d *v1alpha1.Dispatch) string {
	return fmt.Sprintf("%s%s/%s/%s/attempt=%d/uid=%s", CommentPrefix, d.Spec.TargetName, d.Namespace, d.Name, d.Spec.Attempt, d.Spec.Workload.UID)
}

// ParseComment reverses Comment; ok is false for jobs trainyard did not make.
func ParseComment(c string) (target string, w backends.RemoteWork, ok bool) {
	rest, found := strings.CutPrefix(c, CommentPrefix)
	if !found {
		return "", w, false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 5 || !strings.HasPrefix(parts[3], "attempt=") || !strings.HasPrefix(parts[4], "uid=") {
		return "", w, false
	}
	n, err := strconv.ParseInt(strings.TrimPrefix(parts[3], "attempt="), 10, 32)
	if err != nil {
		return "", w, false
	}
	w.DispatchNamespace, w.DispatchName, w.Attempt = parts[1], parts[2], int32(n)
	return parts[0], w, true
}

// Render builds the Slurm job of d on target t. Errors that retrying cannot
// fix wrap backends.ErrRejected.
func Render(d *v1alpha1.Dispatch, t *v1alpha1.Target) (*Job, error) {
	if t == nil || t.Spec.Slurm == nil {
		return nil, backends.Rejected(d, errors.New("target has no slurm configuration"))
	}
	st := t.Spec.Slurm
	tjSpec := &trainer.TrainJobSpec{}
	if err := backends.DecodeObject(d.Spec.TrainJob.Spec.Raw, tjSpec); err != nil {
		return nil, backends.Rejected(d, fmt.Errorf("decode trainJob spec: %w", err))
	}
	rtSpec := &trainer.TrainingRuntimeSpec{}
	if err := backends.DecodeObject(d.Spec.Runtime.Spec.Raw, rtSpec); err != nil {
		return nil, backends.Rejected(d, fmt.Errorf("decode runtime %q: %w", d.Spec.Runtime.Name, err))
	}
	// What the runtime asks for comes first: no partition or account
	// could make up for it.
	if err := supportedOnSlurm(rtSpec); err != nil {
		return nil, backends.Rejected(d, fmt.Errorf("runtime %q: %w", d.Spec.Runtime.Name, err))
	}
	acct, err := account(st, d.Spec.Workload.Namespace)
	if err != nil {
		return nil, backends.Rejected(d, err)
	}
	partition, err := partitionFor(st, d.Spec.PodSets)
	if err != nil {
		return nil, backends.Rejected(d, err)
	}
	tr := tjSpec.Trainer
	if tr == nil {
		tr = &trainer.Trainer{}
	}
	trainerCtr := trainerContainer(rtSpec)
	nodeCtr := nodeContainer(rtSpec)
	if trainerCtr == nil {
		trainerCtr = nodeCtr
	}
	if nodeCtr == nil {
		nodeCtr = trainerCtr
	}
	if trainerCtr == nil {
		return nil, backends.Rejected(d, fmt.Errorf("runtime %q has no node container", d.Spec.Runtime.Name))
	}

	launcher := launcherFor(rtSpec.MLPolicy, st.DefaultLauncher)
	if !offers(st, launcher) {
		return nil, backends.Rejected(d, fmt.Errorf("the %s launcher is not offered by this cluster (spec.slurm.launchers)", launcher))
	}
	if Script(launcher) == "" {
		return nil, backends.Rejected(d, fmt.Errorf("unknown launcher %q", launcher))
	}

	nodes := backends.NumNodes(tjSpec, rtSpec)
	if nodes < 1 {
		return nil, backends.Rejected(d, fmt.Errorf("numNodes must be at least 1, got %d", nodes))
	}

	var gpus int64
	if tr.ResourcesPerNode != nil {
		gpus = gpuCount(*tr.ResourcesPerNode)
	} else if nodeCtr != nil {
		gpus = gpuCount(nodeCtr.Resources)
	}

	argv := append([]string{}, trainerCtr.Command...)
	if len(tr.Command) > 0 {
		argv = append([]string{}, tr.Command...)
	}
	if len(tr.Args) > 0 {
		argv = append(argv, tr.Args...)
	} else {
		argv = append(argv, trainerCtr.Args...)
	}
	encArgv, err := EncodeArgv(argv)
	if err != nil {
		return nil, backends.Rejected(d, err)
	}
	// Every task runs the trainer's image, or on a host that stands for
	// it: an image the target cannot run is refused, never dropped.
	image := trainerCtr.Image
	if tr.Image != nil {
		image = *tr.Image
	}
	if err := backends.ImageRuleOf(&t.Spec).Check(image); err != nil {
		return nil, backends.Rejected(d, err)
	}

	tenantEnv, err := mergeEnv(trainerCtr.Env, tr.Env)
	if err != nil {
		return nil, backends.Rejected(d, err)
	}

	tasks := int32(1)
	nproc := int64(1)
	if gpus > 0 {
		nproc = gpus
	}
	env := []string{EnvArgv + "=" + encArgv}
	starter := ""
	switch launcher {
	case v1alpha1.LauncherTorchrun:
		env = append(env, EnvNprocPerNode+"="+strconv.FormatInt(nproc, 10))
	case v1alpha1.LauncherMPI:
		tasks = int32(nproc)
		if mpi := rtSpec.MLPolicy; mpi != nil && mpi.MPI != nil && mpi.MPI.NumProcPerNode != nil && *mpi.MPI.NumProcPerNode > 0 {
			tasks = *mpi.MPI.NumProcPerNode
		}
		starter = MPIStarterSrun
		if b := path.Base(argv[0]); b == "mpirun" || b == "mpiexec" {
			starter = MPIStarterMpirun
		}
		env = append(env, EnvMPIStarter+"="+starter)
	}
	workDir, err := WorkDir(st, acct.User)
	if err != nil {
		return nil, backends.Rejected(d, err)
	}
	env = append(env, jobFileEnv(st, workDir)...)
	script := ScriptFor(st.ContainerRuntime, launcher)
	if rt := st.ContainerRuntime; t.Spec.RunsContainers() {
		cenv, err := containerEnv(st, launcher, starter, image, workDir)
		if err != nil {
			return nil, backends.Rejected(d, err)
		}
		if script == "" {
			return nil, backends.Rejected(d, fmt.Errorf("the %s launcher has no %s container script", launcher, rt))
		}
		env = append(env, cenv...)
	}
	env = append(env, tenantEnv...)

	var minutes int64
	if s := tjSpec.ActiveDeadlineSeconds; s > 0 {
		minutes = (s + 59) / 60
	}

	requeue := rtSpec.Template.Spec.FailurePolicy != nil && rtSpec.Template.Spec.FailurePolicy.MaxRestarts > 0

	return &Job{
		Requeue:          requeue,
		RequiredNodes:    assignedNodes(d.Spec.PodSets),
		Name:             backends.RemoteName(d),
		Comment:          Comment(d),
		Partition:        partition,
		Account:          acct.Account,
		QOS:              acct.QOS,
		User:             acct.User,
		Nodes:            nodes,
		TasksPerNode:     tasks,
		GPUsPerNode:      gpus,
		TimeLimitMinutes: minutes,
		Env:              env,
		WorkDir:          workDir,
		StdoutPath:       outputTemplate("out"),
		StderrPath:       outputTemplate("err"),
		Script:           script,
		Launcher:         launcher,
	}, nil
}

// supportedOnSlurm refuses what a Slurm allocation cannot do the way the
// runtime asks: steps that must run before the trainer in their own pods
// (Trainer's dataset and model initializers) and volume claims, which have
// no counterpart in a batch script.
func supportedOnSlurm(spec *trainer.TrainingRuntimeSpec) error {
	for _, rj := range spec.Template.Spec.ReplicatedJobs {
		if step := rj.Template.Labels[constants.LabelTrainJobAncestor]; step != "" && step != constants.AncestorTrainer {
			return fmt.Errorf("its %s step (replicated job %s) runs only on Kubernetes spokes", step, rj.Name)
		}
	}
	if n := len(spec.Template.Spec.VolumeClaimPolicies); n > 0 {
		return fmt.Errorf("its %d volume claim policies run only on Kubernetes spokes", n)
	}
	return nil
}

// assignedNodes are the nodes placement chose for the first pod set, when
// its assignment goes down to single nodes (the last level is the node)
// and binds (an advisory one leaves slurmctld to pick).
func assignedNodes(podSets []v1alpha1.PodSetPlacement) []string {
	if len(podSets) == 0 || podSets[0].Topology == nil || len(podSets[0].Topology.Levels) == 0 || podSets[0].Topology.Advisory {
		return nil
	}
	ta := podSets[0].Topology
	if ta.Levels[len(ta.Levels)-1] != HostnameLevel {
		return nil
	}
	var nodes []string
	for _, dom := range ta.Domains {
		nodes = append(nodes, dom.Values[len(dom.Values)-1])
	}
	sort.Strings(nodes)
	return nodes
}

// account is the administrator-set identity of a hub namespace. The tenant
// has no say in it.
func account(st *v1alpha1.SlurmTarget, ns string) (*v1alpha1.SlurmAccount, error) {
	for i := range st.Accounts {
		if st.Accounts[i].Namespace == ns {
			return &st.Accounts[i], nil
		}
	}
	return nil, fmt.Errorf("namespace %s may not use this cluster", ns)
}

// partitionFor maps the flavors Kueue assigned to the first pod set onto one
// partition. With no flavor assigned, a target whose flavors all map to one
// partition uses it.
func partitionFor(st *v1alpha1.SlurmTarget, podSets []v1alpha1.PodSetPlacement) (string, error) {
	var flavors []string
	if len(podSets) > 0 {
		for _, f := range podSets[0].Flavors {
			flavors = append(flavors, f)
		}
	}
	sort.Strings(flavors)
	if len(flavors) == 0 {
		if p := st.Partitions; len(p) > 0 && !slices.ContainsFunc(p, func(sp v1alpha1.SlurmPartition) bool { return sp.Partition != p[0].Partition }) {
			return p[0].Partition, nil
		}
		return "", errors.New("no flavor assigned and the target has more than one partition")
	}
	partition := ""
	for _, f := range flavors {
		p := ""
		for _, sp := range st.Partitions {
			if sp.Flavor == f {
				p = sp.Partition
				break
			}
		}
		if p == "" {
			return "", fmt.Errorf("flavor %q has no partition on this target", f)
		}
		if partition != "" && p != partition {
			return "", fmt.Errorf("flavors %v map to different partitions (%s, %s)", flavors, partition, p)
		}
		partition = p
	}
	return partition, nil
}

// offers reports whether the cluster lists launcher; an empty list means
// the launchers that need nothing beyond Slurm itself.
func offers(st *v1alpha1.SlurmTarget, launcher v1alpha1.Launcher) bool {
	if len(st.Launchers) == 0 {
		return launcher == v1alpha1.LauncherTorchrun || launcher == v1alpha1.LauncherMPI
	}
	return slices.Contains(st.Launchers, launcher)
}

func launcherFor(ml *trainer.MLPolicy, def v1alpha1.Launcher) v1alpha1.Launcher {
	if ml != nil {
		switch {
		case ml.Torch != nil:
			return v1alpha1.LauncherTorchrun
		case ml.MPI != nil:
			return v1alpha1.LauncherMPI
		case ml.Flux != nil:
			return v1alpha1.LauncherFlux
		}
	}
	if def == "" {
		return v1alpha1.LauncherTorchrun
	}
	return def
}

// trainerContainer is the container Trainer applies the trainer overrides to:
// in the replicated job labelled as the trainer ancestor (the MPI launcher
// or the torch node), the container named node or launcher.
func trainerContainer(spec *trainer.TrainingRuntimeSpec) *corev1.Container {
	for i := range spec.Template.Spec.ReplicatedJobs {
		rj := &spec.Template.Spec.ReplicatedJobs[i]
		if rj.Template.Labels[constants.LabelTrainJobAncestor] == constants.AncestorTrainer {
			return pickContainer(rj.Template.Spec.Template.Spec.Containers)
		}
	}
	return nil
}

// nodeContainer is the container of the "node" replicated job, whose
// resources say what each Slurm node needs.
func nodeContainer(spec *trainer.TrainingRuntimeSpec) *corev1.Container {
	for i := range spec.Template.Spec.ReplicatedJobs {
		rj := &spec.Template.Spec.ReplicatedJobs[i]
		if rj.Name == constants.Node {
			return pickContainer(rj.Template.Spec.Template.Spec.Containers)
		}
	}
	return nil
}

func pickContainer(cs []corev1.Container) *corev1.Container {
	for i := range cs {
		if cs[i].Name == constants.Node || cs[i].Name == constants.Launcher {
			return &cs[i]
		}
	}
	if len(cs) > 0 {
		return &cs[0]
	}
	return nil
}

func gpuCount(r corev1.ResourceRequirements) int64 {
	if q, ok := r.Limits[GPUResource]; ok {
		return q.Value()
	}
	if q, ok := r.Requests[GPUResource]; ok {
		return q.Value()
	}
	return 0
}

// EncodeArgv is the TRAINYARD_ARGV value for argv: base64 of every argument
// followed by a NUL byte. A command that is empty, starts with a dash (it
// would be read as an option of srun, flux or exec) or contains a NUL byte
// (which no argv can hold) is refused.
func EncodeArgv(argv []string) (string, error) {
	if len(argv) == 0 || argv[0] == "" {
		return "", errors.New("no command: set the trainer command or the runtime's node container command")
	}
	if strings.HasPrefix(argv[0], "-") {
		return "", fmt.Errorf("command %q may not start with a dash", argv[0])
	}
	var b bytes.Buffer
	for i, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return "", fmt.Errorf("argument %d contains a NUL byte", i)
		}
		b.WriteString(a)
		b.WriteByte(0)
	}
	enc := base64.StdEncoding.EncodeToString(b.Bytes())
	if len(enc) > maxArgvBytes {
		return "", fmt.Errorf("command and args are too long (%d bytes encoded, at most %d)", len(enc), maxArgvBytes)
	}
	return enc, nil
}

// DecodeArgv reverses EncodeArgv.
func DecodeArgv(enc string) ([]string, error) {
	raw, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return nil, err
	}
	if len(raw) == 0 || raw[len(raw)-1] != 0 {
		return nil, errors.New("argv is not NUL-terminated")
	}
	return strings.Split(string(raw[:len(raw)-1]), "\x00"), nil
}

// DefaultWorkDir is the job directory when the Target names none: a
// directory of the user's own in their home, which no other user can
// create or write, on the filesystem the cluster's nodes share.
const DefaultWorkDir = "/home/%u/.trainyard"

// WorkDir is the job directory of user on st, where the job runs and Slurm
// writes its output: spec.slurm.workDir with %u replaced by the user, or
// DefaultWorkDir. It is always the user's own: a template without %u gets
// the user's name appended, so that no two users share a directory in
// which one could create the other's output files first (as anyone can in
// /tmp). The API server validates the template; it is checked again here
// since the agent must never hand Slurm a relative or climbing path.
func WorkDir(st *v1alpha1.SlurmTarget, user string) (string, error) {
	tmpl := st.WorkDir
	if tmpl == "" {
		tmpl = DefaultWorkDir
	}
	if !strings.Contains(tmpl, "%u") {
		tmpl = strings.TrimSuffix(tmpl, "/") + "/%u"
	}
	if !userRE.MatchString(user) {
		return "", fmt.Errorf("mapped user %q is not a valid Unix user name", user)
	}
	dir := strings.ReplaceAll(tmpl, "%u", user)
	if !workDirRE.MatchString(dir) || path.Clean(dir) != strings.TrimSuffix(dir, "/") || dir == "/" {
		return "", fmt.Errorf("spec.slurm.workDir %q does not give a clean absolute path for user %s", st.WorkDir, user)
	}
	return strings.TrimSuffix(dir, "/"), nil
}

var (
	userRE    = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
	workDirRE = regexp.MustCompile(`^(/[A-Za-z0-9._+-]+)+/?$`)
)

// jobFileEnv is what the launcher scripts need to keep the job's files
// private and tidy: the work directory, the retention, and SLURM_UMASK,
// which slurmstepd applies when it creates the output files (before the
// script's own umask 077 can).
func jobFileEnv(st *v1alpha1.SlurmTarget, workDir string) []string {
	days := st.RetentionDays()
	return []string{"SLURM_UMASK=0077", EnvWorkDir + "=" + workDir, EnvRetentionDays + "=" + strconv.Itoa(int(days))}
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Names a tenant may not set: they steer the shell before the fixed script
// runs (BASH_ENV, SHELLOPTS, IFS...), the dynamic loader, or srun, Slurm,
// PMIx, Open MPI and trainyard itself (srun reads SLURM_* and SRUN_* as its
// options, which would let a job pick another account or partition for its
// steps; slurmstepd reads SLURM_UMASK and friends; SPANK plugins take their
// options from _SLURM_SPANK_OPTION_* and SPANK_*, which would let a job
// switch on plugin features the site did not give it; scrun reads SCRUN_*).
// Every name that starts with SLURM, in any case Slurm reads, is refused.
var (
	deniedEnvNames = map[string]bool{
		"BASH_ENV": true, "ENV": true, "LD_PRELOAD": true, "LD_LIBRARY_PATH": true, "LD_AUDIT": true,
		"IFS": true, "PS4": true, "SHELLOPTS": true, "BASHOPTS": true, "GLOBIGNORE": true,
		constants.TorchEnvNumNodes: true, constants.TorchEnvNumProcPerNode: true, constants.TorchEnvNodeRank: true,
		constants.TorchEnvMasterAddr: true, constants.TorchEnvMasterPort: true,
	}
	deniedEnvPrefixes = []string{"SLURM", "_SLURM", "SPANK_", "_SPANK", "SRUN_", "SBATCH_", "SALLOC_", "SCRUN_", "TRAINYARD_",
		"PMIX_", "PMI_", "OMPI_MCA_", "PRTE_MCA_", "BASH_FUNC_", "LD_"}
)

// ValidEnvName reports why a tenant may not set the variable name, or nil.
func ValidEnvName(name string) error {
	if !envNameRE.MatchString(name) {
		return fmt.Errorf("env name %q is not a valid variable name", name)
	}
	if deniedEnvNames[name] {
		return fmt.Errorf("env %s is reserved and may not be set", name)
	}
	for _, p := range deniedEnvPrefixes {
		if strings.HasPrefix(strings.ToUpper(name), p) {
			return fmt.Errorf("env %s is reserved (%s* is set by trainyard or Slurm only)", name, p)
		}
	}
	return nil
}

// mergeEnv is the runtime container's env with the trainer's env applied on
// top (a trainer entry replaces a runtime entry of the same name), as
// "K=V" strings. Values are data and may hold anything but a NUL byte;
// values from secrets, config maps or fields do not exist on Slurm.
func mergeEnv(runtimeEnv, trainerEnv []corev1.EnvVar) ([]string, error) {
	var names []string
	values := map[string]string{}
	for _, list := range [][]corev1.EnvVar{runtimeEnv, trainerEnv} {
		for _, e := range list {
			if err := ValidEnvName(e.Name); err != nil {
				return nil, err
			}
			if e.ValueFrom != nil {
				return nil, fmt.Errorf("env %s uses valueFrom, which Slurm targets do not support", e.Name)
			}
			if strings.IndexByte(e.Value, 0) >= 0 {
				return nil, fmt.Errorf("env %s contains a NUL byte", e.Name)
			}
			if _, seen := values[e.Name]; !seen {
				names = append(names, e.Name)
			}
			values[e.Name] = e.Value
		}
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, n+"="+values[n])
	}
	return out, nil
}

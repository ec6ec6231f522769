package slurm

import "github.com/trainyard-dev/trainyard/api/v1alpha1"

// The batch scripts are fixed text owned by trainyard. No part of a Dispatch
// (command, args, env, names) is ever spliced into them: the tenant's argv
// reaches the job only as data, in TRAINYARD_ARGV (base64 of the arguments,
// each terminated by a NUL byte), and its env only as entries of the job's
// environment array. So whatever a tenant writes, the script slurmrestd
// receives is byte-identical to the one for any other job with the same
// launcher, and cannot carry #SBATCH directives, srun options or shell code.
//
// The scripts only use double quotes inside the decoding prelude so it can be
// embedded in the single-quoted `bash -c` of the torchrun launcher.

// Names of the environment variables trainyard sets for the scripts. Tenants
// may not set any TRAINYARD_* variable.
const (
	EnvArgv          = "TRAINYARD_ARGV"
	EnvNprocPerNode  = "TRAINYARD_NPROC_PER_NODE"
	EnvMPIStarter    = "TRAINYARD_MPI_STARTER"
	EnvHostfile      = "TRAINYARD_HOSTFILE"
	EnvWorkDir       = "TRAINYARD_WORKDIR"
	EnvRetentionDays = "TRAINYARD_RETENTION_DAYS"
	MPIStarterSrun   = "srun"
	MPIStarterMpirun = "mpirun"
)

// scriptHeader also gives the job the HOME and PATH a login would: a job
// submitted through slurmrestd inherits no environment, and Open MPI, for
// one, refuses to start without a home directory. umask 077 makes every
// file the job and its steps create private to the job's user (srun passes
// the umask on to the tasks).
//
// Then it looks after the work directory (TRAINYARD_WORKDIR, the user's own
// directory WorkDir gives, which exists before the job starts: workdir.go):
// a work directory the user owns is made 0700; the job's own output files (Slurm's %x.%j.out/.err, opened
// before the script runs) are made 0600; and the user's trainyard output and
// private job directories older than TRAINYARD_RETENTION_DAYS are removed.
// Only files the user owns are touched, by the user, never through a link.
const scriptHeader = "#!/bin/bash\nset -euo pipefail\numask 077\n" +
	`export PATH="${PATH:-/usr/local/bin:/usr/bin:/bin}"` + "\n" +
	`if [[ -z "${HOME:-}" ]]; then HOME="$(getent passwd "$(id -u)" | cut -d: -f6)"; export HOME="${HOME:-/tmp}"; fi` + "\n" +
	`workdir="${TRAINYARD_WORKDIR:-/tmp}"
if [[ "$workdir" != /tmp && -d "$workdir" && ! -L "$workdir" && -O "$workdir" ]]; then chmod 0700 -- "$workdir"; fi
for f in "$workdir/${SLURM_JOB_NAME:-}.${SLURM_JOB_ID:-}".{out,err}; do if [[ -f "$f" && ! -L "$f" && -O "$f" ]]; then chmod 0600 -- "$f"; fi; done
days="${TRAINYARD_RETENTION_DAYS:-0}"
if [[ "$days" =~ ^[0-9]{1,4}$ ]] && (( 10#$days > 0 )); then
  find "$workdir" -mindepth 1 -maxdepth 1 -user "$(id -u)" -mmin "+$(( 10#$days * 1440 ))" \( \( -type f \( -name '*-a[0-9]*.[0-9]*.out' -o -name '*-a[0-9]*.[0-9]*.err' \) \) -o \( -type d -name '.trainyard-job.*' \) \) -exec rm -rf -- {} + 2>/dev/null || true
fi
` + statusPrelude

// statusPrelude gives the job Trainer's status variables when the agent
// serves the status API: the credential and CA arrive in the job's
// environment (TRAINYARD_STATUS_*, readable only by the job's user) and are
// written to files in a fresh 0700 directory of the work directory, as
// Trainer's plugin mounts them on Kubernetes; the tasks get only the file
// names. A tenant's own KUBEFLOW_TRAINER_SERVER_* values are replaced, as
// Trainer's plugin replaces them. The directory goes when the script exits,
// so with it the script runs srun as a child ($launch is empty) instead of
// exec'ing it; the retention sweep takes one a killed job leaves. Scripts
// with an EXIT trap of their own remove "$statusdir" in it too.
const statusPrelude = `launch=exec
if [[ -n "${TRAINYARD_STATUS_TOKEN:-}" && -n "${TRAINYARD_STATUS_URL:-}" ]]; then
  statusdir="$(mktemp -d "$workdir/.trainyard-job.${SLURM_JOB_ID:?}.XXXXXXXX")"
  trap 'rm -rf -- "$statusdir"' EXIT
  launch=
  printf "%s" "$TRAINYARD_STATUS_TOKEN" > "$statusdir/token"
  printf "%s" "${TRAINYARD_STATUS_CA:-}" > "$statusdir/ca.crt"
  export KUBEFLOW_TRAINER_SERVER_URL="$TRAINYARD_STATUS_URL" KUBEFLOW_TRAINER_SERVER_TOKEN="$statusdir/token" KUBEFLOW_TRAINER_SERVER_CA_CERT="$statusdir/ca.crt"
fi
unset TRAINYARD_STATUS_TOKEN TRAINYARD_STATUS_CA TRAINYARD_STATUS_URL
`

// argvPrelude decodes TRAINYARD_ARGV into the bash array argv. mapfile reads
// NUL-terminated records, so any byte but NUL (newlines, quotes, globs, `$(`)
// survives as data; the array is only ever expanded as "${argv[@]}". The
// input is decoded once as a check before the array is filled, so corrupt
// input fails the job instead of running a truncated command. (The scripts
// never `wait` on a process substitution for its status: bash 5.2 now and
// then answers 255 for one it has already reaped, which failed about one job
// start in a thousand.) A leading dash is refused so the command can never
// be read as an option of srun, flux or exec.
const argvPrelude = `printf "%s" "${TRAINYARD_ARGV:?}" | base64 -d > /dev/null || { echo "trainyard: invalid TRAINYARD_ARGV" >&2; exit 2; }
mapfile -d "" -t argv < <(printf "%s" "$TRAINYARD_ARGV" | base64 -d)
if (( ${#argv[@]} == 0 )) || [[ -z "${argv[0]}" || "${argv[0]}" == -* ]]; then echo "trainyard: invalid TRAINYARD_ARGV" >&2; exit 2; fi
`

// ArgvPrelude is the bash snippet every launcher script starts with (after
// the header) to decode the tenant's argv into the array argv.
func ArgvPrelude() string { return argvPrelude }

// torchEnv exports Trainer's PET_* variables every node shares; each task
// adds its own PET_NODE_RANK.
const torchEnv = `export PET_NNODES="${SLURM_JOB_NUM_NODES:?}"
trainyard_hostnames="$(scontrol show hostnames "${SLURM_JOB_NODELIST:?}")"
mapfile -t hosts <<< "$trainyard_hostnames"
export PET_MASTER_ADDR="${hosts[0]:?}"
# Two jobs may share their first node, so each gets a port of its own
# (torchrun's default 29500 for both made the second fail to listen): the
# job's own in 29500-30499, or the next one nothing listens on there (job
# ids 1000 apart share the first).
trainyard_port=$(( 29500 + ${SLURM_JOB_ID:?} % 1000 ))
for (( trainyard_try = 0; trainyard_try < 1000; trainyard_try++ )); do
  timeout 2 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "${hosts[0]}" "$trainyard_port" 2>/dev/null || break
  trainyard_port=$(( 29500 + (trainyard_port - 29499) % 1000 ))
done
export PET_MASTER_PORT="$trainyard_port"
unset trainyard_port trainyard_try trainyard_hostnames
export PET_NPROC_PER_NODE="${TRAINYARD_NPROC_PER_NODE:-1}"
`

// torchrunScript runs one task per node; each task gets Trainer's PET_*
// variables (which torchrun reads as its options) and execs the tenant argv
// unchanged, as Trainer does on Kubernetes: the command is expected to be
// torchrun (or a python program that reads the PET_* variables itself) and
// trainyard never prepends anything to it.
const torchrunScript = scriptHeader + torchEnv + `$launch srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --kill-on-bad-exit=1 -- /bin/bash -c 'set -euo pipefail
export PET_NODE_RANK="${SLURM_NODEID:?}"
` + argvPrelude + `exec -- "${argv[@]}"
'
`

// mpiScript starts the ranks with srun's PMIx plugin by default. It also
// writes a hostfile of the allocation for programs started by mpirun: with
// TRAINYARD_MPI_STARTER=mpirun (set by trainyard when the command itself is
// mpirun or mpiexec) the tenant's mpirun is run once, on the batch host, and
// finds the hosts through TRAINYARD_HOSTFILE / OMPI_MCA_orte_default_hostfile.
// The hostfile lives in a fresh 0700 directory (mktemp -d) in the work
// directory, never at a name another user could guess and plant first, and
// goes when the script exits (the retention sweep takes any a killed job
// leaves), so the ranks are not exec'd.
const mpiScript = scriptHeader + argvPrelude + `jobdir="$(mktemp -d "$workdir/.trainyard-job.${SLURM_JOB_ID:?}.XXXXXXXX")"
trap 'rm -rf -- "$jobdir" ${statusdir:+"$statusdir"}' EXIT
hostfile="$jobdir/hostfile"
slots="${SLURM_NTASKS_PER_NODE:-1}"
scontrol show hostnames "${SLURM_JOB_NODELIST:?}" | while IFS= read -r host; do printf "%s slots=%s\n" "$host" "$slots"; done > "$hostfile"
export TRAINYARD_HOSTFILE="$hostfile"
export OMPI_MCA_orte_default_hostfile="$hostfile"
case "${TRAINYARD_MPI_STARTER:-srun}" in
srun) srun --mpi=pmix -- "${argv[@]}" ;;
mpirun) "${argv[@]}" ;;
*) echo "trainyard: unknown TRAINYARD_MPI_STARTER" >&2; exit 2 ;;
esac
`

// fluxScript starts one Flux broker per node and runs the tenant argv as a
// Flux job across all of them. Flux is not packaged on Debian, so this
// launcher needs a site that installs flux-core on its compute nodes.
const fluxScript = scriptHeader + argvPrelude + `$launch srun --nodes="${SLURM_JOB_NUM_NODES:?}" --ntasks-per-node=1 -- flux start flux run -N "$SLURM_JOB_NUM_NODES" "${argv[@]}"
`

// Script is the fixed batch script of a launcher ("" for an unknown one).
func Script(l v1alpha1.Launcher) string {
	switch l {
	case v1alpha1.LauncherTorchrun:
		return torchrunScript
	case v1alpha1.LauncherMPI:
		return mpiScript
	case v1alpha1.LauncherFlux:
		return fluxScript
	}
	return ""
}

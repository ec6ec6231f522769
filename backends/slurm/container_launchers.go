package slurm

import "github.com/trainyard-dev/trainyard/api/v1alpha1"

// The container launchers decode the tenant's argv on the batch host, as
// the MPI launcher does, and hand it to each task as positional parameters
// of a fixed /bin/sh -c (the image needs a POSIX shell, no bash) or, for
// MPI, as the step's own argv. The image and the mounts come from
// TRAINYARD_IMAGE and TRAINYARD_CONTAINER_MOUNTS, always quoted, each one
// argument behind a fixed prefix; see containers.go.

// containerTask runs in the container of each torchrun task: it sets the
// node's rank and execs the tenant's argv, which follows it as "$@".
const containerTask = `/bin/sh -c 'PET_NODE_RANK="${SLURM_NODEID:?}"; export PET_NODE_RANK; exec "$@"' trainyard "${argv[@]}"
`

// ociBundle pulls TRAINYARD_IMAGE with skopeo into a fresh private job
// directory (mktemp -d in the work directory, gone when the script exits)
// and unpacks it with umoci --rootless into the OCI bundle
// "$jobdir/bundle", owned by the job's user, for srun --container. It adds
// the mounts to the bundle's config.json: umoci writes "mounts": [ once,
// and a JSON string can never hold that text unescaped. A pull or unpack
// that fails ends the job with ExitImageUnavailable.
const ociBundle = `jobdir="$(mktemp -d "$workdir/.trainyard-job.${SLURM_JOB_ID:?}.XXXXXXXX")"
trap 'chmod -R u+rwX -- "$jobdir" 2>/dev/null; rm -rf -- "$jobdir" ${statusdir:+"$statusdir"}' EXIT
image="${TRAINYARD_IMAGE:?}"
if ! skopeo copy --quiet -- "docker://$image" "oci:$jobdir/image:job" >&2 || ! umoci unpack --rootless --image "$jobdir/image:job" "$jobdir/bundle" >/dev/null; then
  printf "trainyard: cannot pull or unpack the image %s on %s\n" "$image" "${SLURMD_NODENAME:-$(hostname)}" >&2; exit 125
fi
mounts="${TRAINYARD_CONTAINER_MOUNTS:-}"
if [[ -n "$mounts" ]]; then
  config="$(<"$jobdir/bundle/config.json")"
  [[ "$config" == *'"mounts": ['* ]] || { echo "trainyard: the bundle config.json has no mounts list" >&2; exit 125; }
  printf "%s\n" "${config/'"mounts": ['/'"mounts": ['"$mounts"}" > "$jobdir/bundle/config.json"
fi
`

const (
	srunTorch = `srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --kill-on-bad-exit=1 `
	pyxisArgs = `--container-image="${TRAINYARD_IMAGE:?}" ${TRAINYARD_CONTAINER_MOUNTS:+"--container-mounts=$TRAINYARD_CONTAINER_MOUNTS"} `
	// apptainerExec never lets apptainer read the image as an option: it
	// always starts with docker://.
	apptainerExec = `apptainer exec ${TRAINYARD_CONTAINER_MOUNTS:+"--bind=$TRAINYARD_CONTAINER_MOUNTS"} "docker://${TRAINYARD_IMAGE:?}" `
)

// The OCI torchrun launcher does not exec srun: the job directory must be
// removed after the step.
var containerScripts = map[v1alpha1.ContainerRuntime]map[v1alpha1.Launcher]string{
	v1alpha1.ContainerRuntimeOCI: {
		v1alpha1.LauncherTorchrun: scriptHeader + argvPrelude + torchEnv + ociBundle +
			srunTorch + `--container="$jobdir/bundle" -- ` + containerTask,
	},
	v1alpha1.ContainerRuntimePyxis: {
		v1alpha1.LauncherTorchrun: scriptHeader + argvPrelude + torchEnv + `$launch ` + srunTorch + pyxisArgs + `-- ` + containerTask,
		v1alpha1.LauncherMPI:      scriptHeader + argvPrelude + `$launch srun --mpi=pmix ` + pyxisArgs + `-- "${argv[@]}"` + "\n",
	},
	v1alpha1.ContainerRuntimeApptainer: {
		v1alpha1.LauncherTorchrun: scriptHeader + argvPrelude + torchEnv + `$launch ` + srunTorch + `-- ` + apptainerExec + containerTask,
		v1alpha1.LauncherMPI:      scriptHeader + argvPrelude + `$launch srun --mpi=pmix -- ` + apptainerExec + `"${argv[@]}"` + "\n",
	},
}

// ScriptFor is the fixed batch script of launcher l under container runtime
// rt ("" or None: the bare-node launchers of Script), or "" when trainyard
// has none for the pair.
func ScriptFor(rt v1alpha1.ContainerRuntime, l v1alpha1.Launcher) string {
	if rt == "" || rt == v1alpha1.ContainerRuntimeNone {
		return Script(l)
	}
	return containerScripts[rt][l]
}

package slurm

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// Containers: a Target's spec.slurm.containerRuntime runs every task of a
// job in the trainer's image. As with argv, nothing a tenant writes is
// spliced into the scripts: the image reference and the mounts reach the
// job as environment data (TRAINYARD_IMAGE, TRAINYARD_CONTAINER_MOUNTS),
// the scripts expand them only quoted, each as one argument, behind a fixed
// prefix (docker://, --container-image=), and Render refuses any image that
// is not a plain reference, so even a runtime that parses the string
// further (Enroot is a shell script) gets nothing but a name.
//
// Who resolves the image: the node. For OCI the batch script, running as
// the job's user on the first node, pulls the image with skopeo into the
// job's private directory (mktemp -d in the work directory, removed at
// exit) and unpacks it there with umoci --rootless; srun --container then
// runs each task in that bundle through the oci.conf runtime (crun). The
// agent never touches images: it has no access to the nodes' registries
// or filesystems, and a pull belongs to the job's time and identity. Pyxis
// and Apptainer pull themselves, on every node.

// Names of the container variables trainyard sets; tenants may not set them.
const (
	EnvImage           = "TRAINYARD_IMAGE"
	EnvContainerMounts = "TRAINYARD_CONTAINER_MOUNTS"
	// ExitImageUnavailable is the exit code of an OCI job whose image could
	// not be pulled or unpacked on its node (Podman's and Docker's code for
	// "the container could not be made"); the agent reports it with
	// ReasonContainerImage.
	ExitImageUnavailable = 125
	maxImageRef          = 512
	hostLabel            = `[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?`
)

// An image reference as registries and every runtime read it:
// [host[:port]/]path[:tag][@digest], lowercase path components.
// The first component is a registry only when it looks like a host: it has
// a dot or a port, or is localhost.
var imageRefRE = regexp.MustCompile(`^` +
	`(?:(?:(?:localhost|` + hostLabel + `(?:\.` + hostLabel + `)+)(?::[0-9]{1,5})?|` + hostLabel + `:[0-9]{1,5})/)?` +
	`[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*` +
	`(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?` +
	`(?:@[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[A-Za-z0-9=_-]{32,})?$`)

// ValidImage says why ref is not an image reference a container runtime
// may be given, or nil.
func ValidImage(ref string) error {
	if ref == "" {
		return errors.New("no image")
	}
	if len(ref) > maxImageRef {
		return fmt.Errorf("image reference is %d bytes long, at most %d", len(ref), maxImageRef)
	}
	if !imageRefRE.MatchString(ref) {
		return fmt.Errorf("image %q is not an image reference ([registry/]path[:tag][@digest])", ref)
	}
	return nil
}

// pyxisImage writes ref as Enroot reads it: the registry, when there is
// one, is separated from the path by '#' (nvcr.io#nvidia/pytorch:24.01).
func pyxisImage(ref string) string {
	first, rest, ok := strings.Cut(ref, "/")
	if ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return first + "#" + rest
	}
	return ref
}

// containerMounts are the job's work directory (every node sees it) and
// the administrator's containerMounts, each bound at its destination.
func containerMounts(st *v1alpha1.SlurmTarget, workDir string) ([]v1alpha1.SlurmContainerMount, error) {
	var ms []v1alpha1.SlurmContainerMount
	if workDir != "" {
		ms = append(ms, v1alpha1.SlurmContainerMount{Source: workDir, Destination: workDir})
	}
	for _, m := range st.ContainerMounts {
		for _, p := range []string{m.Source, m.Destination} {
			if !mountPathRE.MatchString(p) || path.Clean(p) != p {
				return nil, fmt.Errorf("spec.slurm.containerMounts: %q is not a clean absolute path of letters, digits and . _ + -", p)
			}
		}
		ms = append(ms, m)
	}
	return ms, nil
}

var mountPathRE = regexp.MustCompile(`^(/[A-Za-z0-9._+-]+)+$`)

// mountsValue is TRAINYARD_CONTAINER_MOUNTS for rt: for Pyxis and
// Apptainer their own src:dst[:ro] list, for OCI the mount objects to add
// to the bundle's config.json (each followed by a comma). Paths hold no
// character any of these syntaxes reads (checked by the API server and
// again here).
func mountsValue(rt v1alpha1.ContainerRuntime, ms []v1alpha1.SlurmContainerMount) (string, error) {
	var parts []string
	for _, m := range ms {
		switch rt {
		case v1alpha1.ContainerRuntimeOCI:
			opts := []string{"rbind", "nosuid", "nodev"}
			if m.ReadOnly {
				opts = append(opts, "ro")
			}
			b, err := json.Marshal(struct {
				Destination string   `json:"destination"`
				Type        string   `json:"type"`
				Source      string   `json:"source"`
				Options     []string `json:"options"`
			}{m.Destination, "bind", m.Source, opts})
			if err != nil {
				return "", err
			}
			parts = append(parts, string(b)+",")
		default:
			s := m.Source + ":" + m.Destination
			if m.ReadOnly {
				s += ":ro"
			}
			parts = append(parts, s)
		}
	}
	if rt == v1alpha1.ContainerRuntimeOCI {
		return strings.Join(parts, ""), nil
	}
	return strings.Join(parts, ","), nil
}

// containerEnv checks what a job needs to run in a container on st and
// returns the variables that carry the image and the mounts.
func containerEnv(st *v1alpha1.SlurmTarget, launcher v1alpha1.Launcher, mpiStarter, image, workDir string) ([]string, error) {
	rt := st.ContainerRuntime
	switch {
	case launcher == v1alpha1.LauncherFlux:
		return nil, fmt.Errorf("the Flux launcher does not run in containers (containerRuntime %s)", rt)
	case launcher == v1alpha1.LauncherMPI && rt == v1alpha1.ContainerRuntimeOCI:
		return nil, errors.New("the MPI launcher does not run in OCI containers: its PMIx server is not reachable inside them (use Pyxis or Apptainer)")
	case launcher == v1alpha1.LauncherMPI && mpiStarter == MPIStarterMpirun:
		return nil, fmt.Errorf("mpirun would start the ranks from the batch host outside the container (containerRuntime %s): run the program itself and let srun start the ranks", rt)
	}
	if err := ValidImage(image); err != nil {
		return nil, fmt.Errorf("containerRuntime %s runs the trainer's image: %w (set spec.trainer.image or the runtime's node container image)", rt, err)
	}
	ms, err := containerMounts(st, workDir)
	if err != nil {
		return nil, err
	}
	mounts, err := mountsValue(rt, ms)
	if err != nil {
		return nil, err
	}
	if rt == v1alpha1.ContainerRuntimePyxis {
		image = pyxisImage(image)
	}
	env := []string{EnvImage + "=" + image}
	if mounts != "" {
		env = append(env, EnvContainerMounts+"="+mounts)
	}
	return env, nil
}

package convert

import (
	"fmt"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"k8s.io/utils/ptr"
)

// openMPI is the only mpiImplementation Trainer's MPI policy has.
const openMPI = "OpenMPI"

// mpi maps an MPIJob (kubeflow.org/v1 or v2beta1) onto numNodes nodes: one
// a Worker, and the Launcher too when it runs as a worker. The nodes get the
// Worker's image, env and resources, the trainer the Launcher's command, and
// numProcPerNode the slotsPerWorker.
func (c *conversion) mpi(tj *trainer.TrainJob) error {
	spec := c.job.Spec
	base := "spec.mpiReplicaSpecs"
	c.unknownReplicas(base, spec.MPIReplicaSpecs, replicaLauncher, replicaWorker)
	launcher, worker := spec.MPIReplicaSpecs[replicaLauncher], spec.MPIReplicaSpecs[replicaWorker]
	// mpi-operator defaults the Worker replicas to 0, Training Operator to 1.
	def := int32(1)
	if c.job.APIVersion == mpiOperatorV2beta1 {
		def = 0
	}
	nodes := replicas(worker, def)
	asWorker := launcher != nil && ptr.Deref(spec.RunLauncherAsWorker, false)
	if asWorker {
		nodes++
		c.warnf("spec.runLauncherAsWorker: numNodes %d counts the %s, so use a runtime with mlPolicy.mpi.runLauncherAsNode", nodes, replicaLauncher)
	}
	primary, primaryType := worker, replicaWorker
	if worker == nil && asWorker {
		primary, primaryType = launcher, replicaLauncher
	}
	if primary == nil || nodes == 0 {
		return fmt.Errorf("%s has no %s replicas", base, replicaWorker)
	}
	name := ptr.Deref(spec.MainContainer, "mpi")
	w, err := c.mainContainer(base, primaryType, primary, name)
	if err != nil {
		return err
	}
	t := trainerOf(w)
	t.NumNodes = ptr.To(nodes)
	t.NumProcPerNode = spec.SlotsPerWorker
	if impl := spec.MPIImplementation; impl != "" && impl != openMPI {
		c.warnf("spec.mpiImplementation %s is not carried over: Trainer's MPI runtimes run %s", impl, openMPI)
	}
	c.restartPolicy(base, replicaLauncher, launcher)
	c.restartPolicy(base, replicaWorker, worker)
	if launcher != nil && primary != launcher {
		if err := c.launcher(t, base, launcher, w, name); err != nil {
			return err
		}
	}
	tj.Spec.Trainer = t
	return nil
}

// launcher gives the trainer the Launcher's command, args and env, and warns
// about what differs from the Worker.
func (c *conversion) launcher(t *trainer.Trainer, base string, launcher *v1ReplicaSpec, w *v1Container, name string) error {
	l, err := c.mainContainer(base, replicaLauncher, launcher, name)
	if err != nil {
		return err
	}
	if len(w.Command) > 0 || len(w.Args) > 0 {
		c.warnf("the %s command and args are not carried over: the runtime starts the workers, and the trainer runs the %s's command", replicaWorker, replicaLauncher)
	}
	t.Command, t.Args = l.Command, l.Args
	if l.Image != nil && ptr.Deref(l.Image, "") != ptr.Deref(w.Image, "") {
		c.warnf("the %s image %q is not carried over: every node runs the %s image %q", replicaLauncher, *l.Image, replicaWorker, ptr.Deref(w.Image, ""))
	}
	if l.Resources != nil {
		c.warnf("the %s resources are not carried over: resourcesPerNode comes from the %s", replicaLauncher, replicaWorker)
	}
	t.Env = c.mergeEnv(w.Env, l.Env)
	if r := ptr.Deref(launcher.Replicas, 1); r != 1 {
		c.warnf("%s.%s.replicas %d is not carried over: the runtime runs one launcher", base, replicaLauncher, r)
	}
	return nil
}

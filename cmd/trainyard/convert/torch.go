package convert

import (
	"fmt"
	"strconv"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// pytorch maps Master and Worker onto numNodes nodes running the Worker's
// (or else the Master's) training container. An elastic job runs its
// replicas as a fixed numNodes; the elasticPolicy fields are warned about.
func (c *conversion) pytorch(tj *trainer.TrainJob) error {
	specs := c.job.Spec.PyTorchReplicaSpecs
	base := "spec.pytorchReplicaSpecs"
	c.unknownReplicas(base, specs, replicaMaster, replicaWorker)
	master, worker := specs[replicaMaster], specs[replicaWorker]
	primary, primaryType := worker, replicaWorker
	if worker == nil {
		primary, primaryType = master, replicaMaster
	}
	if primary == nil {
		return fmt.Errorf("%s has neither %s nor %s", base, replicaMaster, replicaWorker)
	}
	main, err := c.mainContainer(base, primaryType, primary, "pytorch")
	if err != nil {
		return err
	}
	t := trainerOf(main)
	t.NumNodes = ptr.To(replicas(master, 1) + replicas(worker, 1))
	c.restartPolicy(base, replicaMaster, master)
	c.restartPolicy(base, replicaWorker, worker)
	if master != nil && worker != nil {
		m, err := c.mainContainer(base, replicaMaster, master, "pytorch")
		if err != nil {
			return err
		}
		c.compareContainers(replicaMaster, m, main)
	}
	t.NumProcPerNode = c.nprocPerNode()
	tj.Spec.Trainer = t
	return nil
}

// nprocPerNode is spec.nprocPerNode as a number ("4" or 4), else the
// deprecated spec.elasticPolicy.nProcPerNode; "auto", "gpu" and "cpu" have
// no numProcPerNode and are warned about.
func (c *conversion) nprocPerNode() *int32 {
	n := c.job.Spec.NprocPerNode
	var elastic *int32
	if ep := c.job.Spec.ElasticPolicy; ep != nil {
		elastic = ep.NProcPerNode
	}
	if n == nil {
		return elastic
	}
	if elastic != nil {
		c.warnf("spec.elasticPolicy.nProcPerNode is not carried over: spec.nprocPerNode %s takes its place", n.String())
	}
	if n.Type == intstr.Int {
		return ptr.To(n.IntVal)
	}
	if v, err := strconv.ParseInt(n.StrVal, 10, 32); err == nil {
		return ptr.To(int32(v))
	}
	c.warnf("spec.nprocPerNode %q is not carried over: numProcPerNode takes a number, and the runtime's default applies", n.StrVal)
	return nil
}

package testing

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// SnapshotTrainJob stores tj as the Dispatch's TrainJob snapshot: its name,
// its UID when set, and its spec as JSON.
func (w *DispatchWrapper) SnapshotTrainJob(tj *trainer.TrainJob) *DispatchWrapper {
	w.Spec.TrainJob.Name = tj.Name
	if tj.UID != "" {
		w.Spec.TrainJob.UID = tj.UID
	}
	w.Spec.TrainJob.Spec = runtime.RawExtension{Raw: mustJSON(tj.Spec)}
	return w
}

// SnapshotRuntime stores spec as the Dispatch's runtime snapshot of the given
// kind and name, with the sha256 hash of its JSON.
func (w *DispatchWrapper) SnapshotRuntime(kind v1alpha1.RuntimeKind, name string, spec trainer.TrainingRuntimeSpec) *DispatchWrapper {
	raw := mustJSON(spec)
	sum := sha256.Sum256(raw)
	w.Spec.Runtime = v1alpha1.RuntimeSnapshot{
		Kind: kind, Name: name, Hash: "sha256:" + hex.EncodeToString(sum[:]),
		Spec: runtime.RawExtension{Raw: raw},
	}
	return w
}

// MPIDispatch is a Dispatch d1 to spoke1 of an OpenMPI TrainJob of
// numNodes nodes with procs processes each, admitted for a launcher and its
// node pods (one fewer when the launcher runs as a node too).
func MPIDispatch(numNodes, procs int32, launcherAsNode bool) *DispatchWrapper {
	tj := MakeTrainJob("mpi", "team-a").NumNodes(numNodes).GPUsPerNode(1).Obj()
	rt := MPIRuntimeSpec(1, procs)
	rt.MLPolicy.MPI.RunLauncherAsNode = ptr.To(launcherAsNode)
	nodes := numNodes
	if launcherAsNode {
		nodes = max(numNodes-1, 1)
	}
	return MakeDispatch("d1", "trainyard-spoke1", "spoke1").
		SnapshotTrainJob(tj).SnapshotRuntime(v1alpha1.RuntimeKindClusterTrainingRuntime, "mpi", rt).
		PodSets(v1alpha1.PodSetPlacement{Name: "launcher", Count: 1}, v1alpha1.PodSetPlacement{Name: "node", Count: nodes})
}

func mustJSON(v any) []byte {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return raw
}

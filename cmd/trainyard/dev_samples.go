package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/kubework"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/harness/kube"
	"github.com/trainyard-dev/trainyard/test/harness/slurm"
	"github.com/trainyard-dev/trainyard/test/harness/trainyard"
)

const (
	// sampleSpokeNamespace prefixes each tenant's namespace on the spokes.
	sampleSpokeNamespace = "jobs"
	cacheInitializerSA   = "kubeflow-trainer-cache-initializer"
	sampleNamespace      = "team-a"
	sampleQueue          = "lq"
	sampleFlavor         = "gpu"
	// sampleRuntime is not named like any of Kubeflow's runtimes, so
	// applying those to the sandbox hub leaves the samples' own alone.
	sampleRuntime = "sandbox-torch"
)

// startTrainyard sets up a sample quota (a ClusterQueue with trainyard's
// admission check), a torch runtime, and runs the hub and one agent per
// spoke and for the Slurm cluster in this process, logging to the sandbox
// folder. The Slurm target "hpc" serves the same flavor from its gpu
// partition, running team-a's jobs as the Unix user alice.
func startTrainyard(ctx context.Context, fleet *kube.Fleet, sl *slurm.Cluster, o devOptions) (*trainyard.Controllers, error) {
	logFile, err := os.Create(filepath.Join(o.dir, "trainyard.log"))
	if err != nil {
		return nil, err
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(logFile)))
	gpus := fmt.Sprint(int64(o.spokes*o.nodes)*o.gpus + slurmGPUs)
	if err := trainyard.SetUpQueue(ctx, fleet.Hub, trainyard.Queue{
		ClusterQueue: "team-a", Namespace: sampleNamespace, LocalQueue: sampleQueue, Flavor: sampleFlavor, GPUs: gpus,
	}); err != nil {
		return nil, err
	}
	// No toleration and no node selector: spoke nodes carry no taint, so
	// runtimes as Kubeflow ships them run there too.
	rt := tytesting.MakeClusterTrainingRuntime(sampleRuntime).
		PodAnnotation("kwok.trainyard.dev/run-for", "45s").Obj()
	if err := fleet.Hub.Client.Create(ctx, rt); err != nil {
		return nil, err
	}
	opts := trainyard.Options{
		Flavor: sampleFlavor, TopologyLevels: []string{"topology.kubernetes.io/rack"},
		HeartbeatInterval: 2 * time.Second, SpokeNamespace: sampleSpokeNamespace,
		// Kubeflow's data-cache runtime runs its initializer as this
		// account; the sandbox allows it and creates it, as a site using
		// the cache would.
		AllowedPodFields: &v1alpha1.AllowedPodFields{ServiceAccountNames: []string{cacheInitializerSA}},
	}
	for _, s := range fleet.Spokes {
		ns := kubework.TenantNamespace(sampleSpokeNamespace, sampleNamespace)
		if err := s.EnsureNamespace(ctx, ns); err != nil {
			return nil, err
		}
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: cacheInitializerSA, Namespace: ns}}
		if err := s.Client.Create(ctx, sa); client.IgnoreAlreadyExists(err) != nil {
			return nil, err
		}
	}
	if sl != nil {
		opts.Slurm = []trainyard.SlurmTarget{{Name: "hpc", Cluster: sl, APIVersion: "v0.0.42",
			Accounts: []v1alpha1.SlurmAccount{{Namespace: sampleNamespace, User: "alice"}}}}
	}
	return trainyard.Start(ctx, fleet, opts)
}

// slurmGPUs are the GPUs of the harness Slurm cluster's gpu partition.
const slurmGPUs = 16

// sampleProgram is what sample jobs run: kwok ignores it on the spokes; on
// Slurm it prints the torch wiring it got and works for 45 seconds.
const sampleProgram = `import os, time
print("node rank", os.environ["PET_NODE_RANK"], "of", os.environ["PET_NNODES"], "master", os.environ["PET_MASTER_ADDR"], flush=True)
time.sleep(45)
`

// submitSamples submits n two-node TrainJobs of 4 GPUs per node.
func submitSamples(ctx context.Context, fleet *kube.Fleet, n int) error {
	for i := 0; i < n; i++ {
		tj := tytesting.MakeTrainJob(fmt.Sprintf("sample-%d", i), sampleNamespace).Queue(sampleQueue).
			RuntimeRef(trainer.ClusterTrainingRuntimeKind, sampleRuntime).NumNodes(2).GPUsPerNode(4).
			Command([]string{"python3", "-c", sampleProgram}).Obj()
		if err := fleet.Hub.Client.Create(ctx, tj); err != nil {
			return fmt.Errorf("submit %s: %w", tj.Name, err)
		}
	}
	return nil
}

// watchDispatches prints the table of Dispatches whenever it changes.
func watchDispatches(ctx context.Context, fleet *kube.Fleet) {
	last := ""
	for {
		var list v1alpha1.DispatchList
		if err := fleet.Hub.Client.List(ctx, &list); err == nil {
			if table := dispatchTable(list.Items); table != last {
				fmt.Printf("\n%s  dispatches:\n%s", time.Now().Format("15:04:05"), table)
				last = table
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func dispatchTable(items []v1alpha1.Dispatch) string {
	sort.Slice(items, func(i, j int) bool { return items[i].Spec.TrainJob.Name < items[j].Spec.TrainJob.Name })
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TRAINJOB\tTARGET\tATTEMPT\tPHASE\tREMOTE")
	for _, d := range items {
		remote := ""
		if d.Status.Remote != nil {
			r := d.Status.Remote
			remote = r.Kind + " " + r.Name
			switch {
			case r.Namespace != "":
				remote = r.Kind + " " + r.Namespace + "/" + r.Name
			case r.ID != "":
				remote += " (id " + r.ID + ")"
			}
		}
		fmt.Fprintf(w, "%s/%s\t%s\t%d\t%s\t%s\n", d.Spec.Workload.Namespace, d.Spec.TrainJob.Name, d.Spec.TargetName,
			d.Spec.Attempt, d.Status.Phase, remote)
	}
	w.Flush()
	return b.String()
}

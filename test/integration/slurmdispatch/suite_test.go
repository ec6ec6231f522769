// Package slurmdispatch runs trainyard end to end onto Slurm: a hub with
// Kueue and trainyard's hub controllers, the real Slurm 24.11 cluster of the
// harness registered as a Slurm Target, and its agent minting per-user
// tokens. TrainJobs run as batch jobs through slurmrestd. Beside it a kwok
// spoke of CPU-only nodes serves another flavor, as in a mixed fleet: the
// suite's queue is Slurm-only, and no job of it may land there.
package slurmdispatch

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/slurm"
	trainyard "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/controllers"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	hslurm "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/slurm"
	"github.com/trainyard-dev/trainyard/spoke/statusapi"
	"github.com/trainyard-dev/trainyard/test/util"
)

const (
	flavor     = "hpc-gpu"
	tenant     = "team-a"
	queue      = "lq"
	targetName = "hpc"
	// spokeName is the kwok spoke, whose Target serves spokeFlavor only.
	spokeName   = "spoke1"
	spokeFlavor = "spoke-cpu"
	// slurmUser is who team-a's jobs run as, set by the administrator.
	slurmUser = "alice"
	// workDir is the Target's spec.slurm.workDir; makeWorkDirs makes it for
	// alice and bob, as an administrator would.
	workDir = "/scratch/%u/trainyard"
)

var env struct {
	fleet       *kube.Fleet
	cluster     *hslurm.Cluster
	rest        *slurm.Client
	controllers *trainyard.Controllers
}

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("skipping Slurm dispatch tests in -short mode")
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var err error
	if env.cluster, err = hslurm.Start(ctx, hslurm.Options{MinJobAge: 5 * time.Second}); err != nil {
		fmt.Fprintln(os.Stderr, "start Slurm:", err)
		return 1
	}
	defer func() {
		if err := env.cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: stop Slurm cluster:", err)
			code = 1
		}
	}()
	if env.rest, err = env.cluster.RESTClient("v0.0.42"); err != nil {
		fmt.Fprintln(os.Stderr, "slurmrestd client:", err)
		return 1
	}
	if err := env.cluster.MakeWorkDirs(ctx, workDir, "alice", "bob"); err != nil {
		fmt.Fprintln(os.Stderr, "make work directories:", err)
		return 1
	}
	if err := buildMPIHello(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "build MPI hello:", err)
		return 1
	}
	statusDir, err := os.MkdirTemp("", "trainyard-status-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "status endpoint state:", err)
		return 1
	}
	defer os.RemoveAll(statusDir)
	status := &statusapi.EndpointOptions{StateDir: statusDir}
	return util.RunFleetSuite(m, util.FleetSuite{
		Fleet:   kube.FleetOptions{Spokes: 1},
		Timeout: 5 * time.Minute,
		LogFile: "trainyard-slurm-controllers.log",
		// CPU-only nodes: a job that asks for no GPUs fits here best of all.
		Nodes: func(*kube.Cluster) []kube.NodeSpec {
			return []kube.NodeSpec{{Name: spokeName + "-cpu-0"}, {Name: spokeName + "-cpu-1"}}
		},
		Queues: []trainyard.Queue{{ClusterQueue: "cq", Namespace: tenant, LocalQueue: queue, Flavor: flavor, GPUs: "64"}},
		SetUp: func(_ context.Context, e *util.FleetEnv) error {
			env.fleet = e.Fleet
			addr, err := freeLoopbackAddr()
			if err != nil {
				return fmt.Errorf("status endpoint address: %w", err)
			}
			// The emulated compute nodes share this machine's loopback.
			status.Listen, status.URL = addr, "https://"+addr
			return nil
		},
		Options: &trainyard.Options{
			Flavor: flavor, SpokeFlavors: map[string]string{spokeName: spokeFlavor},
			LostTargetTimeout: time.Minute, HeartbeatInterval: time.Second,
			FenceInterval: 2 * time.Second, Resync: 5 * time.Second,
			Slurm: []trainyard.SlurmTarget{{
				Name: targetName, Cluster: env.cluster, APIVersion: "v0.0.42", PollInterval: time.Second,
				Partitions: []v1alpha1.SlurmPartition{{Flavor: flavor, Partition: "gpu"}},
				Accounts:   []v1alpha1.SlurmAccount{{Namespace: tenant, User: slurmUser}},
				// Flux is not packaged here: TestFluxLauncherCommands puts a
				// stand-in flux on the nodes.
				Launchers: []v1alpha1.Launcher{v1alpha1.LauncherTorchrun, v1alpha1.LauncherMPI, v1alpha1.LauncherFlux},
				WorkDir:   workDir,
				Status:    status,
			}},
		},
		Started: func(_ context.Context, e *util.FleetEnv) error {
			env.controllers = e.Controllers
			return nil
		},
	})
}

// freeLoopbackAddr is a loopback address with a port free right now.
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// mpiHello prints one line per rank: its rank, the world size and the node.
const mpiHello = `#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  int rank, size, len; char host[MPI_MAX_PROCESSOR_NAME];
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Get_processor_name(host, &len);
  int sum = 0;
  MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  const char *node = getenv("SLURMD_NODENAME");
  printf("hello rank=%d size=%d node=%s sum=%d\n", rank, size, node ? node : "?", sum);
  MPI_Finalize();
  return 0;
}
`

// buildMPIHello compiles the MPI program in alice's home with the chroot's
// Open MPI, as a user of the cluster would.
func buildMPIHello(ctx context.Context) error {
	src := env.cluster.Path("/home/" + slurmUser + "/mpi-hello.c")
	if err := os.WriteFile(src, []byte(mpiHello), 0o644); err != nil {
		return err
	}
	_, err := env.cluster.ExecAs(ctx, slurmUser, "mpicc", "-O2", "-o", "/home/"+slurmUser+"/mpi-hello", "/home/"+slurmUser+"/mpi-hello.c")
	return err
}

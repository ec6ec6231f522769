// Package sandbox is trainyard's local sandbox, the product behind
// `trainyard dev up`: a hub control plane with Kueue, kwok GPU spokes, a
// Slurm cluster that runs jobs on its bare nodes and one that runs them in
// OCI containers pulled from an image registry on loopback (the runners in
// fleet, slurm, registry and controllers), trainyard's hub and agents, a
// sample queue and sample TrainJobs. The integration tests import the same
// runners directly.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/controllers"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/registry"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/slurm"
)

// KueueVersion is the Kueue release the sandbox hub runs.
const KueueVersion = "v0.19.0"

// Options size the sandbox.
type Options struct {
	// Dir holds kubeconfigs and component logs; Start empties it of a
	// previous sandbox's.
	Dir string
	// Spokes is the number of spoke clusters.
	Spokes int
	// NoSlurm leaves the Slurm clusters out.
	NoSlurm bool
	// SlurmInstance picks which of the machine's harness Slurm clusters the
	// sandbox runs (slurm.Options.Instance): this one for target hpc and
	// the next for target hpc-oci. 0-3 are the Slurm suites' own; 4 and
	// up let a sandbox run beside them.
	SlurmInstance int
	// Nodes is the number of kwok GPU nodes per spoke, GPUsPerNode their size.
	Nodes       int
	GPUsPerNode int64
	// Samples is the number of sample TrainJobs (2 nodes x 4 GPUs).
	Samples int
	// Progress receives one line per start-up step (may be nil).
	Progress func(line string)
}

// Validate returns an error naming the first bad option.
func (o Options) Validate() error {
	switch {
	case o.Dir == "":
		return errors.New("the sandbox needs a folder")
	case o.Spokes < 0:
		return fmt.Errorf("spokes must not be negative, got %d", o.Spokes)
	case o.Spokes == 0 && o.NoSlurm:
		return errors.New("a sandbox without spokes needs Slurm")
	case o.Nodes < 1 && o.Spokes > 0:
		return fmt.Errorf("nodes per spoke must be at least 1, got %d", o.Nodes)
	case o.GPUsPerNode < 1:
		return fmt.Errorf("GPUs per node must be at least 1, got %d", o.GPUsPerNode)
	case o.Samples < 0:
		return fmt.Errorf("samples must not be negative, got %d", o.Samples)
	case o.SlurmInstance < 0 || o.SlurmInstance > slurm.MaxInstance-1:
		return fmt.Errorf("the Slurm instance must be 0..%d (the sandbox also runs the next one), got %d", slurm.MaxInstance-1, o.SlurmInstance)
	}
	return nil
}

// Sandbox is a running sandbox. Stop it once.
type Sandbox struct {
	Fleet *fleet.Fleet
	// Slurm runs target hpc's jobs on its bare nodes; SlurmOCI target
	// hpc-oci's in OCI containers pulled from Registry.
	Slurm       *slurm.Cluster
	SlurmOCI    *slurm.Cluster
	Registry    *registry.Registry
	Controllers *controllers.Controllers
	// Ready is how long the start took.
	Ready   time.Duration
	opts    Options
	logFile *os.File
}

// Start empties o.Dir and starts the sandbox; on error, or when ctx ends
// during the start, whatever started is stopped again.
func Start(ctx context.Context, o Options) (s *Sandbox, err error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	progress := func(format string, args ...any) {
		if o.Progress != nil {
			o.Progress(fmt.Sprintf(format, args...))
		}
	}
	// Everything below builds or reads files of a checkout: fail before
	// starting anything when there is none.
	if _, err := fleet.RepoRoot(); err != nil {
		return nil, err
	}
	if err := clean(o.Dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	// The control planes' installers and the controllers log through
	// controller-runtime: to the sandbox's folder, never to the terminal.
	logFile, err := os.Create(filepath.Join(o.Dir, "trainyard.log"))
	if err != nil {
		return nil, err
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(logFile)))
	t0 := time.Now()
	s = &Sandbox{opts: o, logFile: logFile}
	defer func() {
		if err != nil {
			s.Stop()
			s = nil
		}
	}()
	progress("starting hub and %d spokes (logs in %s) ...", o.Spokes, o.Dir)
	if s.Fleet, err = fleet.StartFleet(ctx, fleet.FleetOptions{Spokes: o.Spokes, HubOnly: o.Spokes == 0, Dir: o.Dir}); err != nil {
		return s, err
	}
	for _, c := range s.Fleet.Spokes {
		if err = c.AddKwokNodes(ctx, spokeNodes(c.Name, o)...); err != nil {
			return s, err
		}
	}
	var image string
	if !o.NoSlurm {
		progress("starting 2 Slurm clusters (bare nodes, OCI containers) and an image registry ...")
		if image, err = s.startSlurm(ctx); err != nil {
			return s, fmt.Errorf("slurm: %w (use --no-slurm to go without)", err)
		}
	}
	if err = ctx.Err(); err != nil {
		return s, err
	}
	progress("starting the hub and the agents ...")
	if s.Controllers, err = startTrainyard(ctx, s.Fleet, s.Slurm, s.SlurmOCI, o); err != nil {
		return s, err
	}
	if err = submitSamples(ctx, s.Fleet, o.Samples); err != nil {
		return s, err
	}
	if s.Slurm != nil && o.Samples > 0 {
		if err = submitRetrying(ctx, s.Fleet, torchSample()); err != nil {
			return s, err
		}
		progress("submitted %s to queue %s/%s: real PyTorch (torchrun, gloo all-reduce) on the Slurm target hpc, reporting its progress (kubectl get trainjob %s -n %s -o jsonpath='{.status.trainerStatus}')", TorchSample, SampleNamespace, SlurmQueue, TorchSample, SampleNamespace)
		if err = submitRetrying(ctx, s.Fleet, ociSample(image)); err != nil {
			return s, err
		}
		progress("submitted %s to queue %s/%s: a shell in image %s on 2 nodes of the Slurm target hpc-oci", OCISample, SampleNamespace, OCIQueue, image)
	}
	s.Ready = time.Since(t0)
	return s, nil
}

// spokeNodes are the kwok nodes of spoke: o.Nodes of o.GPUsPerNode GPUs,
// two to a rack.
func spokeNodes(spoke string, o Options) []fleet.NodeSpec {
	var nodes []fleet.NodeSpec
	for i := 0; i < o.Nodes; i++ {
		nodes = append(nodes, fleet.NodeSpec{
			Name: fmt.Sprintf("%s-gpu-%d", spoke, i), GPUs: o.GPUsPerNode,
			Labels: map[string]string{"topology.kubernetes.io/rack": fmt.Sprintf("rack-%d", i/2)},
		})
	}
	return nodes
}

// startSlurm starts both Slurm clusters side by side, lets the second run
// OCI containers from a registry it starts, and pushes the sample image
// there; it returns the image's reference.
func (s *Sandbox) startSlurm(ctx context.Context) (string, error) {
	oci := make(chan error, 1)
	go func() {
		var err error
		s.SlurmOCI, err = slurm.Start(ctx, slurm.Options{Instance: s.opts.SlurmInstance + 1})
		oci <- err
	}()
	var err error
	s.Slurm, err = slurm.Start(ctx, slurm.Options{Instance: s.opts.SlurmInstance})
	if errOCI := <-oci; err == nil {
		err = errOCI
	}
	if err != nil {
		return "", err
	}
	if s.Registry, err = registry.Start(); err != nil {
		return "", err
	}
	if err := s.SlurmOCI.EnableOCI(ctx, s.Registry.Addr); err != nil {
		return "", err
	}
	return s.Registry.Push(ctx, sampleImage, registry.ShellImage(s.SlurmOCI.Root, SampleImageMarker))
}

// Stop stops the controllers, Slurm and the fleet, and waits for them;
// progress lines go where Options.Progress says.
func (s *Sandbox) Stop() {
	progress := func(line string) {
		if s.opts.Progress != nil {
			s.opts.Progress(line)
		}
	}
	if s.Controllers != nil {
		progress("stopping the hub and the agents ...")
		s.Controllers.Stop()
	}
	for _, c := range []*slurm.Cluster{s.Slurm, s.SlurmOCI} {
		if c != nil {
			progress("stopping Slurm cluster " + c.Name + " ...")
			_ = c.Stop()
		}
	}
	if s.Registry != nil {
		_ = s.Registry.Close()
	}
	if s.Fleet != nil {
		progress("stopping the fleet ...")
		_ = s.Fleet.Stop()
	}
	if err := fleet.StopStrays(10 * time.Second); err != nil {
		progress(err.Error())
	}
	_ = s.logFile.Close()
}

// Access is how to reach one cluster of the sandbox.
type Access struct {
	Cluster string
	Role    string
	// Access is a KUBECONFIG=... setting or the slurmrestd URL.
	Access string
}

// Access lists the sandbox's clusters and how to reach them.
func (s *Sandbox) Access() []Access {
	out := []Access{{s.Fleet.Hub.Name, fmt.Sprintf("hub (Kueue %s)", KueueVersion), "KUBECONFIG=" + s.Fleet.Hub.Kubeconfig}}
	for _, c := range s.Fleet.Spokes {
		out = append(out, Access{c.Name, fmt.Sprintf("spoke (%d kwok nodes x %d GPUs)", s.opts.Nodes, s.opts.GPUsPerNode),
			"KUBECONFIG=" + c.Kubeconfig})
	}
	if s.Slurm != nil {
		out = append(out, Access{"slurm", "Slurm 24.11 (slurmrestd), target hpc: bare nodes", fmt.Sprintf("%s (chroot %s)", s.Slurm.URL, s.Slurm.Root)})
	}
	if s.SlurmOCI != nil {
		out = append(out, Access{"slurm-oci", "Slurm 24.11 (slurmrestd), target hpc-oci: OCI containers (crun)",
			fmt.Sprintf("%s (chroot %s)", s.SlurmOCI.URL, s.SlurmOCI.Root)})
	}
	if s.Registry != nil {
		out = append(out, Access{"registry", "OCI image registry (loopback, in memory)", s.Registry.Addr})
	}
	return out
}

// Dispatches lists the hub's Dispatches.
func (s *Sandbox) Dispatches(ctx context.Context) ([]v1alpha1.Dispatch, error) {
	var list v1alpha1.DispatchList
	if err := s.Fleet.Hub.Client.List(ctx, &list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

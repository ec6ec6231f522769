package fleet

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"
)

// Fleet is a hub cluster and its spoke clusters.
type Fleet struct {
	Hub    *Cluster
	Spokes []*Cluster
	// StartDuration is how long bringing the whole fleet up took.
	StartDuration time.Duration
}

// FleetOptions sizes a fleet.
type FleetOptions struct {
	// Spokes is the number of spoke clusters (default 2).
	Spokes int
	// HubOnly starts no spokes (for suites whose jobs run on Slurm).
	HubOnly bool
	// Dir holds one folder of logs per cluster.
	Dir string
	// NoHubKueue leaves the Kueue manager off the hub, for tests that
	// drive Workloads by hand.
	NoHubKueue bool
	// KueueFairSharing turns on fair sharing in the hub's Kueue.
	KueueFairSharing bool
	// LWS runs the LeaderWorkerSet manager on every spoke.
	LWS bool
}

// HubOptions is a trainyard hub: Kueue with the Trainer, JobSet and
// trainyard CRDs, kube-controller-manager for garbage collection (a deleted
// TrainJob takes its Workload with it), and no Trainer controller, since
// trainyard runs the jobs elsewhere.
func HubOptions(dir string, kueue bool) Options {
	return Options{
		Name:              "hub",
		Dir:               dir,
		CRDs:              []string{CRDsKueue, CRDsJobSet, CRDsTrainer, CRDsTrainyard},
		ControllerManager: true,
		Kueue:             kueue,
	}
}

// SpokeOptions is a spoke: a full control plane whose JobSets become pods
// that kwok runs on simulated GPU nodes, with a default StorageClass whose
// claims hostpath-provisioner binds.
func SpokeOptions(name, dir string) Options {
	return Options{
		Name:              name,
		Dir:               dir,
		CRDs:              []string{CRDsJobSet, CRDsLWS},
		ControllerManager: true,
		Scheduler:         true,
		Kwok:              true,
		Storage:           true,
		JobSet:            true,
	}
}

// StartFleet starts the hub and the spokes in parallel; on any error all of
// them are stopped.
func StartFleet(ctx context.Context, opts FleetOptions) (*Fleet, error) {
	if opts.Spokes == 0 {
		opts.Spokes = 2
	}
	if opts.HubOnly {
		opts.Spokes = 0
	}
	hub := HubOptions(subdir(opts.Dir, "hub"), !opts.NoHubKueue)
	hub.KueueFairSharing = opts.KueueFairSharing
	all := []Options{hub}
	for i := 1; i <= opts.Spokes; i++ {
		name := fmt.Sprintf("spoke%d", i)
		spoke := SpokeOptions(name, subdir(opts.Dir, name))
		spoke.LWS = opts.LWS
		all = append(all, spoke)
	}
	t0 := time.Now()
	clusters := make([]*Cluster, len(all))
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i := range all {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			clusters[i], errs[i] = Start(ctx, all[i])
		}(i)
	}
	wg.Wait()
	f := &Fleet{Hub: clusters[0], Spokes: clusters[1:], StartDuration: time.Since(t0)}
	if err := errors.Join(errs...); err != nil {
		_ = f.Stop()
		return nil, err
	}
	return f, nil
}

func subdir(dir, name string) string {
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, name)
}

// Stop stops every cluster of the fleet.
func (f *Fleet) Stop() error {
	var errs []error
	for _, c := range append([]*Cluster{f.Hub}, f.Spokes...) {
		if c != nil {
			errs = append(errs, c.Stop())
		}
	}
	return errors.Join(errs...)
}

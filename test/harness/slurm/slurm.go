// Package slurm is the tests' name for the sandbox's Slurm runner
// (internal/sandbox/slurm): a real single-host Slurm 24.11 cluster with
// slurmrestd in a chroot. Everything here forwards to it.
package slurm

import sslurm "github.com/trainyard-dev/trainyard/internal/sandbox/slurm"

// DefaultURL is where the cluster's slurmrestd listens.
const DefaultURL = sslurm.DefaultURL

type (
	Options = sslurm.Options
	Cluster = sslurm.Cluster
)

var (
	Start    = sslurm.Start
	FindRoot = sslurm.FindRoot
)

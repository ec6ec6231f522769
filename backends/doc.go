// Package backends defines the small interface the agent drives (submit,
// observe, cancel, capacity) and holds one subpackage per execution system:
// jobset and lws for Kubernetes spokes, slurm for slurmrestd.
package backends

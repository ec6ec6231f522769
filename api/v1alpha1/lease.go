package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// An agent holds a coordination.k8s.io Lease in its Target's agent
// namespace on the hub and renews it at an interval. The hub judges the
// lease by when it observed each renewal, on its own clock.
const (
	// LabelLeaseTarget marks an agent's Lease (value: LabelValue of the
	// Target's name), so the hub watches these Leases and no others.
	LabelLeaseTarget = "trainyard.dev/lease-target"
	// AnnotationLeaseTarget on an agent's Lease is the Target's full name.
	AnnotationLeaseTarget = "trainyard.dev/target"

	// What the agent enforces when it goes without a renewal, written on
	// every renewal so that the hub judges by what the agent will really
	// do, not by a Target edit the agent may not have seen:
	//
	// AnnotationLeaseLoss is the Target's spec.leaseLoss as the agent last
	// read it (Requeue or Hold). The agent stops running work only where it
	// says Requeue, and the hub requeues only where the agent said so.
	AnnotationLeaseLoss = "trainyard.dev/lease-loss"
	// AnnotationFenceAfterSeconds is how long the agent goes without a
	// renewal before it stops the running work of a Requeue target.
	AnnotationFenceAfterSeconds = "trainyard.dev/fence-after-seconds"
	// AnnotationStopWithinSeconds bounds how long the processes of stopped
	// work may live on (pods' termination grace, Slurm's KillWait).
	AnnotationStopWithinSeconds = "trainyard.dev/stop-within-seconds"
)

// maxLeaseName keeps a Lease name a DNS subdomain.
const maxLeaseName = 253

// LeaseName is the name of the Lease the agent of target holds.
func LeaseName(target string) string {
	const prefix = "trainyard-target-"
	if len(prefix)+len(target) <= maxLeaseName {
		return prefix + target
	}
	sum := sha256.Sum256([]byte(target))
	return prefix + hex.EncodeToString(sum[:])
}

// Advertised is what an agent's Lease says the agent enforces.
// +kubebuilder:object:generate=false
type Advertised struct {
	// MayRequeue: the agent stops its running work after FenceAfter
	// without a renewal, and the hub may requeue it.
	MayRequeue bool
	FenceAfter time.Duration
	StopWithin time.Duration
}

// AdvertisedBy reads what lease says its agent enforces. A Lease without
// the annotations was written by an agent from before them, which stopped
// its work after the lease duration whatever the policy.
func AdvertisedBy(lease *coordinationv1.Lease) Advertised {
	a := lease.Annotations
	seconds := func(key string) time.Duration {
		n, err := strconv.Atoi(a[key])
		if err != nil || n < 0 {
			return 0
		}
		return time.Duration(n) * time.Second
	}
	policy, ok := a[AnnotationLeaseLoss]
	if !ok {
		return Advertised{MayRequeue: true, FenceAfter: time.Duration(leaseSeconds(lease)) * time.Second}
	}
	return Advertised{MayRequeue: policy != string(LeaseLossHold),
		FenceAfter: seconds(AnnotationFenceAfterSeconds), StopWithin: seconds(AnnotationStopWithinSeconds)}
}

func leaseSeconds(l *coordinationv1.Lease) int32 {
	if l.Spec.LeaseDurationSeconds == nil {
		return 0
	}
	return *l.Spec.LeaseDurationSeconds
}

package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
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

// Package kube is the tests' name for the sandbox's fleet runner
// (internal/sandbox/fleet): real Kubernetes control planes with kwok GPU
// nodes, Kueue, JobSet and LeaderWorkerSet. Everything here forwards to it.
package kube

import "github.com/trainyard-dev/trainyard/internal/sandbox/fleet"

// Manifest set names (see CRDPaths) and the fleet's well-known names.
const (
	CRDsKueue     = fleet.CRDsKueue
	CRDsJobSet    = fleet.CRDsJobSet
	CRDsLWS       = fleet.CRDsLWS
	CRDsTrainer   = fleet.CRDsTrainer
	CRDsTrainyard = fleet.CRDsTrainyard

	StorageClassName    = fleet.StorageClassName
	HostPathProvisioner = fleet.HostPathProvisioner
	GPUResource         = fleet.GPUResource
	KueueNamespace      = fleet.KueueNamespace
)

// KwokTaint and KwokToleration are the kwok nodes' taint and the
// toleration of pods meant for them.
var (
	KwokTaint      = fleet.KwokTaint
	KwokToleration = fleet.KwokToleration
)

type (
	Cluster      = fleet.Cluster
	Options      = fleet.Options
	Fleet        = fleet.Fleet
	FleetOptions = fleet.FleetOptions
	NodeSpec     = fleet.NodeSpec
	Process      = fleet.Process
)

var (
	Start        = fleet.Start
	StartFleet   = fleet.StartFleet
	HubOptions   = fleet.HubOptions
	SpokeOptions = fleet.SpokeOptions
	RackNodes    = fleet.RackNodes
	Capacity     = fleet.Capacity
	RepoRoot     = fleet.RepoRoot
	BinDir       = fleet.BinDir
	ModuleDir    = fleet.ModuleDir
	CRDPaths     = fleet.CRDPaths
	FreePort     = fleet.FreePort
	Scheme       = fleet.Scheme
	ServingCert  = fleet.ServingCert
)

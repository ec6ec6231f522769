package v1alpha1

// Condition types and reasons set by trainyard's controllers and agents. Every
// reason a controller writes is an exported constant here, so the
// troubleshooting guide can list them all.
const (
	// TargetAvailable is True while the agent's heartbeat is fresh and it
	// reaches its backend. The hub requeues a target's Dispatches elsewhere
	// once it has been False past the lost-target timeout.
	TargetAvailable = "Available"
	// TargetBackendReachable is written by the agent: whether the spoke API
	// server or slurmrestd answers.
	TargetBackendReachable = "BackendReachable"

	// DispatchAccepted is True once the remote work exists.
	DispatchAccepted = "Accepted"
	// DispatchRunningCondition is True while the remote work runs.
	DispatchRunningCondition = "Running"
	// DispatchFinished is True once the remote work reached a final phase.
	DispatchFinished = "Finished"
)

// Reasons.
const (
	ReasonHeartbeatFresh   = "HeartbeatFresh"
	ReasonHeartbeatStale   = "HeartbeatStale"
	ReasonNoHeartbeat      = "NoHeartbeat"
	ReasonBackendReachable = "BackendReachable"
	ReasonBackendError     = "BackendError"

	ReasonRemoteCreated   = "RemoteCreated"
	ReasonRemoteAdopted   = "RemoteAdopted"
	ReasonRemoteRunning   = "RemoteRunning"
	ReasonRemoteSucceeded = "RemoteSucceeded"
	ReasonRemoteFailed    = "RemoteFailed"
	ReasonRemoteCancelled = "RemoteCancelled"
	ReasonRemoteRejected  = "RemoteRejected"
	ReasonRemoteMissing   = "RemoteMissing"

	// ReasonDispatchRejected is the reason of the Failed condition the hub
	// sets on a TrainJob trainyard will never run: no target could run it,
	// or its runtime or Dispatch is invalid. The message says why.
	ReasonDispatchRejected = "DispatchRejected"

	// Slurm job ends and events, beyond plain failure.
	ReasonSlurmTimeLimit   = "TimeLimit"
	ReasonSlurmNodeFail    = "NodeFail"
	ReasonSlurmPreempted   = "Preempted"
	ReasonSlurmOutOfMemory = "OutOfMemory"
	ReasonSlurmRequeued    = "Requeued"
)

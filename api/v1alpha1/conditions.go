package v1alpha1

// Condition types and reasons set by trainyard's controllers and agents. Every
// reason a controller, an agent or a backend writes is an exported constant
// here, so the troubleshooting guide can list them all.
const (
	// TrainJobCreated and TrainJobRunning are the conditions the hub adds
	// to a TrainJob beside Trainer's Complete and Failed: where the remote
	// work is before it ends.
	TrainJobCreated = "Created"
	TrainJobRunning = "Running"

	// TargetAvailable is True while the agent's lease is fresh (renewed
	// within the lease duration, judged on the hub's clock) and it reaches
	// its backend. The hub requeues a target's Dispatches elsewhere only with
	// reason LeaseExpired: lease duration plus grace passed, and the hub is
	// not in disruption mode.
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
	ReasonHeartbeatFresh = "HeartbeatFresh"
	// ReasonHeartbeatStale is no longer written; kept for old objects.
	ReasonHeartbeatStale = "HeartbeatStale"
	ReasonNoHeartbeat    = "NoHeartbeat"
	// ReasonLeaseNotRenewed: the agent's lease ran out on the hub's clock;
	// nothing is placed there, and its jobs are requeued once the grace
	// passes too.
	ReasonLeaseNotRenewed = "LeaseNotRenewed"
	// ReasonLeaseExpired: lease duration and grace passed; the agent has
	// stopped its remote work by now, and the hub requeues its Dispatches.
	ReasonLeaseExpired = "LeaseExpired"
	// ReasonHubDisrupted: the lease ran out, but so did those of more than
	// the disruption threshold of all targets. The hub assumes it is the
	// one cut off and requeues nothing.
	ReasonHubDisrupted = "HubDisrupted"
	// ReasonAwaitingAgent: lease duration and grace passed on a target whose
	// leaseLoss is Hold. Its jobs stay until the agent returns or an
	// operator sets outOfService.
	ReasonAwaitingAgent = "AwaitingAgent"
	// ReasonOutOfService: the lease ran out and an operator said nothing of
	// the target runs any more; the hub requeues its Dispatches at once.
	ReasonOutOfService     = "OutOfService"
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
	// ReasonAgentFenced: the agent could not renew its lease and stopped
	// the remote work itself. The hub requeues the job.
	ReasonAgentFenced = "AgentFenced"
	// ReasonSubmitFailing: the agent's creates of the remote work keep
	// failing with errors other than a refusal (a spoke webhook answering
	// Forbidden, missing RBAC, slurmrestd answering 500). While it retries,
	// the Dispatch's Accepted condition is False with this reason, dated at
	// the first failure. Past spoke.MaxSubmitFailures tries in a row over
	// at least spoke.SubmitFailingFor, the agent rejects the Dispatch with
	// this reason and the last error, and the hub takes it as the target's
	// refusal: it places the job elsewhere, or rejects it when no target is
	// left, releasing its quota.
	ReasonSubmitFailing = "SubmitFailing"

	// ReasonDispatchRejected is the reason of the Failed condition the hub
	// sets on a TrainJob trainyard will never run: no target could run it,
	// or its runtime or Dispatch is invalid. The message says why.
	ReasonDispatchRejected = "DispatchRejected"
	// ReasonRuntimeNotPinned is the reason of the Failed condition the hub
	// sets on a queued TrainJob whose runtime was never pinned (created
	// while the pinning webhook was off, or queued past the pinned-runtime
	// policy): Kueue gets no pod sets for it, and it can never be pinned.
	ReasonRuntimeNotPinned = "RuntimeNotPinned"

	// ReasonAdmissionCheckActive is the reason of the Active condition the
	// hub sets on trainyard's AdmissionChecks.
	ReasonAdmissionCheckActive = "Active"

	// Reasons the JobSet backend reports when the JobSet's own condition
	// gives none.
	ReasonJobSetCreated   = "JobSetCreated"
	ReasonPodsRunning     = "PodsRunning"
	ReasonJobSetCompleted = "Completed"
	ReasonJobSetFailed    = "Failed"
	ReasonJobSetDeleted   = "JobSetDeleted"

	// Reasons the LeaderWorkerSet backend reports.
	ReasonLeaderWorkerSetCreated = "LeaderWorkerSetCreated"
	ReasonAllPodsReady           = "AllPodsReady"
	ReasonLeaderSucceeded        = "LeaderSucceeded"
	ReasonContainerFailed        = "ContainerFailed"
	ReasonLeaderWorkerSetDeleted = "LeaderWorkerSetDeleted"

	// Slurm job ends and events, beyond plain failure.
	ReasonSlurmTimeLimit   = "TimeLimit"
	ReasonSlurmNodeFail    = "NodeFail"
	ReasonSlurmPreempted   = "Preempted"
	ReasonSlurmOutOfMemory = "OutOfMemory"
	ReasonSlurmRequeued    = "Requeued"
	// ReasonContainerImage: the job's container image could not be pulled
	// or unpacked on its node (containerRuntime OCI).
	ReasonContainerImage = "ContainerImageUnavailable"
)

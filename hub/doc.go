// Package hub wires trainyard's hub controllers, which run beside Kueue on
// the hub cluster (setup.go, manager.go). Each subpackage has one job:
//   - admissioncheck: keeps trainyard's Kueue AdmissionChecks Active.
//   - kueuejob: Kueue's TrainJob integration as the hub runs it (pod sets
//     from the pinned runtime).
//   - snapshot: pins a queued TrainJob's runtime at creation and takes the
//     immutable runtime snapshot a Dispatch carries.
//   - dispatch: the admission-check controller for Workloads: places the
//     job, writes the Dispatch, drives the check state and mirrors the
//     Dispatch's progress into the TrainJob.
//   - eligibility: whether a target could ever run a job, answered by the
//     backend's own render.
//   - placement: pure topology fit (no client): which target and domain.
//   - targets: the agents' leases, target health and requeue of lost
//     targets.
//   - tenantview: what the hub relays to tenants (placement summaries,
//     LogRequests).
package hub

// Package dispatch is the hub's admission-check controller for Workloads:
// once Kueue has reserved quota it snapshots the runtime, places the job on
// a Target, writes the Dispatch, drives the AdmissionCheck state from the
// Dispatch's progress and mirrors that progress into the TrainJob.
//
// One Reconciler, its files named for what they hold:
//   - controller.go: the Reconciler, its options, event reasons and setup,
//     and one pass (load the Workload's state, then the phases in order).
//   - start_attempt.go: the attempt of a job with no live Dispatch, from
//     its runtime snapshot to its written Dispatch; attempt numbers.
//   - choose_target.go: the job's request, and placement under the
//     in-flight record's lock (chooseAndBook).
//   - wait_for_room.go: a job no target has room for now: its check, and
//     passes that wait for a wake-up.
//   - build_dispatch.go: the Dispatch object of one attempt, and its name.
//   - eligibility.go: which targets could ever run the job, and the
//     agents' refusals.
//   - check_state.go: trainyard's AdmissionCheck state, and rejecting a job.
//   - requeue.go: requeuing an attempt, when a target is lost (targetLost)
//     or a Dispatch deleted while its job ran, and letting go of the
//     Dispatches of a lost target (letGo).
//   - teardown.go: deleting a Workload's Dispatches once it holds no quota
//     for its attempt.
//   - trainjob_status.go: the TrainJob status the hub owns (jobsStatus,
//     conditions).
//   - progress.go: the paced relay of a job's progress reports.
//   - latency.go: the admission-to-running metric, once per attempt.
//   - target_drain.go: the Target finalizer and the controller that drains
//     a Target being deleted.
//   - watch.go: the Dispatch and Target watches, field indexes, wake-ups
//     and the cache transform; predicates.go: the Workload watch's filter.
//
// What is in flight to each target and the Workloads waiting for room are
// kept by the pure package inflight, which the Reconciler feeds from its
// watches and decides under.
package dispatch

// Package hub holds trainyard's hub controllers, which run beside Kueue on the
// hub cluster. Each subpackage has one job: admissioncheck (Kueue
// AdmissionCheck state), dispatch (Dispatch lifecycle and TrainJob status),
// placement (pure topology-fit code), snapshot (runtime snapshots) and
// targets (heartbeats, health, requeue of lost targets).
package hub

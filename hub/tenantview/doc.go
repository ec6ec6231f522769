// Package tenantview is what the hub relays to tenants, so that they never
// need access to the targets' agent namespaces (where Dispatches carry every
// team's commands and environment): a placement summary written onto each
// TrainJob, and LogRequests answered through the agents once a
// SubjectAccessReview of their requester allows it.
package tenantview

// Package trainyard is the tests' name for the sandbox's controllers
// runner (internal/sandbox/controllers): trainyard's hub and agents on a
// fleet, each stoppable and restartable. Everything here forwards to it.
package trainyard

import "github.com/trainyard-dev/trainyard/internal/sandbox/controllers"

// CheckName is the AdmissionCheck SetUpQueue creates.
const CheckName = controllers.CheckName

type (
	Options     = controllers.Options
	SlurmTarget = controllers.SlurmTarget
	Controllers = controllers.Controllers
	Component   = controllers.Component
	Queue       = controllers.Queue
	// Registration is what Register made: credentials and options for
	// running the hub and agents elsewhere, e.g. as processes.
	Registration = controllers.Registration
)

var (
	Start      = controllers.Start
	Register   = controllers.Register
	SetUpQueue = controllers.SetUpQueue
	QueueFor   = controllers.QueueFor
)

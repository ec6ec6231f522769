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
)

var (
	Start      = controllers.Start
	SetUpQueue = controllers.SetUpQueue
)

// Package backendtest holds checks of the backends.Backend contract that
// every backend's unit tests run against their own fakes.
package backendtest

import (
	"context"
	"testing"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
)

// CancelStep changes the remote system (Do, may be nil), after which
// Cancel must report Gone.
type CancelStep struct {
	Do   func()
	Gone bool
}

// CheckCancel calls b.Cancel(d) after each step and reports every answer
// that differs from the step's: Cancel reports gone only once every
// process of d's work has ended, and keeps saying so.
func CheckCancel(t testing.TB, b backends.Backend, d *v1alpha1.Dispatch, steps []CancelStep) {
	t.Helper()
	for i, s := range steps {
		if s.Do != nil {
			s.Do()
		}
		gone, err := b.Cancel(context.Background(), d)
		if err != nil || gone != s.Gone {
			t.Errorf("Cancel #%d = %v, %v; want %v", i+1, gone, err, s.Gone)
		}
	}
}

package testing

import (
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// UpdateCase is one change to an object, and whether a predicate passes
// the update from the object before the change to the one after it.
type UpdateCase[T client.Object] struct {
	Change func(T)
	Pass   bool
}

// ExpectUpdates runs each case as a subtest: two copies of base(), the
// case's change made to the second, and p must pass the update between
// them or not, as the case says.
func ExpectUpdates[T client.Object](t *testing.T, p predicate.Predicate, base func() T, cases map[string]UpdateCase[T]) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			old, cur := base(), base()
			tc.Change(cur)
			if got := p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: cur}); got != tc.Pass {
				t.Errorf("passes the update: %v, want %v", got, tc.Pass)
			}
		})
	}
}

package backends

import (
	"errors"
	"fmt"
	"testing"
)

func TestRejectionReason(t *testing.T) {
	cases := map[string]struct {
		err  error
		want string
	}{
		"as the renders wrap it":   {fmt.Errorf("%w: dispatch ns/d: %w", ErrRejected, errors.New("no command")), "no command"},
		"wrapped once more":        {fmt.Errorf("submit: %w", fmt.Errorf("%w: dispatch ns/d: %w", ErrRejected, errors.New("no command"))), "submit: rejected by backend: dispatch ns/d: no command"},
		"the sentinel with a text": {fmt.Errorf("%w: too big", ErrRejected), "too big"},
		"not a rejection":          {errors.New("connection refused"), ""},
		"nil":                      {nil, ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := RejectionReason(tc.err); got != tc.want {
				t.Errorf("RejectionReason(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
}

package backends

import (
	"errors"
	"strings"
)

// RejectionReason is the backend's own words in an error wrapping
// ErrRejected, without the sentinel and the Dispatch name the render
// functions put in front (they wrap as "%w: dispatch ns/name: %w"); "" when
// err is not a rejection.
func RejectionReason(err error) string {
	if !errors.Is(err, ErrRejected) {
		return ""
	}
	if u, ok := err.(interface{ Unwrap() []error }); ok {
		if errs := u.Unwrap(); len(errs) > 1 && !errors.Is(errs[len(errs)-1], ErrRejected) {
			return errs[len(errs)-1].Error()
		}
	}
	return strings.TrimPrefix(err.Error(), ErrRejected.Error()+": ")
}

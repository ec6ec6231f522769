package backends

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// Rejected is err as the render functions report a refusal of Dispatch d:
// wrapping ErrRejected, as "%w: dispatch ns/name: %w" (RejectionReason
// takes err's words back out).
func Rejected(d *v1alpha1.Dispatch, err error) error {
	return fmt.Errorf("%w: dispatch %s/%s: %w", ErrRejected, d.Namespace, d.Name, err)
}

// DecodeObject decodes a JSON object, such as a Dispatch's runtime or
// TrainJob snapshot; empty or non-object input is an error rather than a
// silently empty spec.
func DecodeObject(raw []byte, into any) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return errors.New("not a JSON object")
	}
	return json.Unmarshal(raw, into)
}

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

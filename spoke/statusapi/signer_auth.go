package statusapi

import (
	"context"

	"k8s.io/utils/clock"
)

// SignerAuth accepts the credentials a Signer minted.
type SignerAuth struct {
	Signer *Signer
	Clock  clock.PassiveClock
}

// Authenticate checks the credential's signature, target and expiry; the
// server then checks the Dispatch and attempt it names.
func (a SignerAuth) Authenticate(_ context.Context, token, _, _ string) (Caller, error) {
	c, err := a.Signer.Verify(token, a.Clock.Now())
	if err != nil {
		return Caller{}, err
	}
	return Caller{Dispatch: c.Dispatch, Attempt: c.Attempt}, nil
}

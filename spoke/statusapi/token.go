package statusapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// tokenPrefix versions the credential format and keeps it apart from JWTs.
const tokenPrefix = "tyst1"

// MinKeyBytes is the least key length a Signer accepts.
const MinKeyBytes = 32

// ErrBadToken is every reason a credential is refused; which one is not
// told to the caller.
var ErrBadToken = errors.New("invalid status credential")

// Claims are what a credential minted by Signer speaks for: one attempt of
// one Dispatch on one target, until it expires.
type Claims struct {
	Target   string    `json:"t"`
	Dispatch types.UID `json:"d"`
	Attempt  int32     `json:"a"`
	Expires  int64     `json:"e"`
}

// Signer mints and checks the per-job credentials of work that runs where
// no Kubernetes token can be projected (Slurm). A credential is an HMAC
// over its claims with the agent's key: another agent (another key or
// target) refuses it, and it expires.
type Signer struct {
	key    []byte
	target string
}

// NewSigner returns a Signer for target's credentials under key.
func NewSigner(key []byte, target string) (*Signer, error) {
	if len(key) < MinKeyBytes {
		return nil, fmt.Errorf("status credential key: %d bytes, need at least %d", len(key), MinKeyBytes)
	}
	if target == "" {
		return nil, fmt.Errorf("status credential key: no target")
	}
	return &Signer{key: append([]byte(nil), key...), target: target}, nil
}

// Mint returns the credential of attempt of Dispatch uid, valid until
// expires.
func (s *Signer) Mint(uid types.UID, attempt int32, expires time.Time) string {
	payload, _ := json.Marshal(Claims{Target: s.target, Dispatch: uid, Attempt: attempt, Expires: expires.Unix()})
	signed := tokenPrefix + "." + base64.RawURLEncoding.EncodeToString(payload)
	return signed + "." + base64.RawURLEncoding.EncodeToString(s.mac(signed))
}

// Verify returns the claims of raw if this Signer minted it for its target
// and it has not expired at now.
func (s *Signer) Verify(raw string, now time.Time) (Claims, error) {
	var c Claims
	parts := strings.Split(raw, ".")
	if len(parts) != 3 || parts[0] != tokenPrefix {
		return c, ErrBadToken
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || !hmac.Equal(sig, s.mac(parts[0]+"."+parts[1])) {
		return c, ErrBadToken
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || json.Unmarshal(payload, &c) != nil {
		return c, ErrBadToken
	}
	if c.Target != s.target || c.Dispatch == "" || now.Unix() >= c.Expires {
		return c, ErrBadToken
	}
	return c, nil
}

func (s *Signer) mac(msg string) []byte {
	h := hmac.New(sha256.New, s.key)
	h.Write([]byte(msg))
	return h.Sum(nil)
}

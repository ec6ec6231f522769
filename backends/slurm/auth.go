package slurm

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Credentials are the two headers of slurmrestd's rest_auth/jwt scheme.
// Token is a secret: it is never logged, and no error here contains it.
type Credentials struct {
	User  string
	Token string
}

// TokenSource gives the credentials to act as a Unix user on the cluster.
type TokenSource interface {
	Credentials(ctx context.Context, user string) (Credentials, error)
}

// SecretReader returns the current bytes of a credential (a file or a
// Secret key). It is called again on every renewal, so rotation is picked up.
type SecretReader func(ctx context.Context) ([]byte, error)

// SigningKeySource mints a token per user with the cluster's HS256 JWT key,
// as `scontrol token` does, and renews it at half its lifetime. Slurm checks
// the "sun" claim, so the token is good for that user only.
type SigningKeySource struct {
	Key      SecretReader
	Lifetime time.Duration
	Now      func() time.Time

	mu     sync.Mutex
	tokens map[string]mintedToken
}

type mintedToken struct {
	token  string
	renew  time.Time
	expiry time.Time
}

// DefaultTokenLifetime is the lifetime of minted tokens.
const DefaultTokenLifetime = 15 * time.Minute

// Credentials returns a cached token for user or mints a new one.
func (s *SigningKeySource) Credentials(ctx context.Context, user string) (Credentials, error) {
	if user == "" {
		return Credentials{}, errors.New("slurm auth: no user")
	}
	now := time.Now()
	if s.Now != nil {
		now = s.Now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.tokens[user]; ok && now.Before(t.renew) {
		return Credentials{User: user, Token: t.token}, nil
	}
	key, err := s.Key(ctx)
	if err != nil {
		return Credentials{}, fmt.Errorf("slurm auth: read signing key: %w", err)
	}
	// The key is used byte for byte, as slurmctld reads jwt_hs256.key: it
	// is binary, and a last byte 0x0A is part of it, not a line end.
	if len(key) < 16 {
		return Credentials{}, fmt.Errorf("slurm auth: signing key is %d bytes, too short to be a Slurm jwt_key", len(key))
	}
	life := s.Lifetime
	if life <= 0 {
		life = DefaultTokenLifetime
	}
	tok, err := signHS256(key, map[string]any{"iat": now.Unix(), "exp": now.Add(life).Unix(), "sun": user})
	if err != nil {
		return Credentials{}, err
	}
	if s.tokens == nil {
		s.tokens = map[string]mintedToken{}
	}
	s.tokens[user] = mintedToken{token: tok, renew: now.Add(life / 2), expiry: now.Add(life)}
	return Credentials{User: user, Token: tok}, nil
}

func signHS256(key []byte, claims map[string]any) (string, error) {
	enc := base64.RawURLEncoding
	header := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	body, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	unsigned := header + "." + enc.EncodeToString(body)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(unsigned))
	return unsigned + "." + enc.EncodeToString(mac.Sum(nil)), nil
}

// StaticTokenSource reads a JWT of a user Slurm lets act for others
// (SlurmUser or root). The token is re-read when it is within a minute of
// its expiry or when Refresh says so, so an external rotation (a renewed
// Secret) is picked up without a restart.
type StaticTokenSource struct {
	Token SecretReader
	Now   func() time.Time
	// Refresh is how often the token is re-read even if it is not about to
	// expire (default 1 minute).
	Refresh time.Duration

	mu     sync.Mutex
	token  string
	expiry time.Time
	readAt time.Time
}

// Credentials returns the token with user as the user to act as.
func (s *StaticTokenSource) Credentials(ctx context.Context, user string) (Credentials, error) {
	if user == "" {
		return Credentials{}, errors.New("slurm auth: no user")
	}
	now := time.Now()
	if s.Now != nil {
		now = s.Now()
	}
	refresh := s.Refresh
	if refresh <= 0 {
		refresh = time.Minute
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	stale := s.token == "" || now.Sub(s.readAt) >= refresh || (!s.expiry.IsZero() && now.Add(time.Minute).After(s.expiry))
	if stale {
		raw, err := s.Token(ctx)
		if err != nil {
			return Credentials{}, fmt.Errorf("slurm auth: read token: %w", err)
		}
		// A token is text: surrounding white space (a file's line end) and
		// scontrol's SLURM_JWT= prefix are dropped.
		tok := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(raw)), "SLURM_JWT="))
		if tok == "" {
			return Credentials{}, errors.New("slurm auth: token is empty")
		}
		s.token, s.readAt, s.expiry = tok, now, tokenExpiry(tok)
	}
	if !s.expiry.IsZero() && !now.Before(s.expiry) {
		return Credentials{}, fmt.Errorf("slurm auth: token expired at %s and was not renewed", s.expiry.UTC().Format(time.RFC3339))
	}
	return Credentials{User: user, Token: s.token}, nil
}

// TokenUser is the user a token was minted for (its "sun" claim), or "".
func TokenUser(tok string) string {
	var claims struct {
		Sun string `json:"sun"`
	}
	if readClaims(tok, &claims) != nil {
		return ""
	}
	return claims.Sun
}

func readClaims(tok string, into any) error {
	tok = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(tok), "SLURM_JWT="))
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return errors.New("not a JWT")
	}
	body, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return err
	}
	return json.Unmarshal(body, into)
}

// tokenExpiry reads the exp claim without checking the signature (slurmctld
// does that); zero when it cannot be read.
func tokenExpiry(tok string) time.Time {
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if readClaims(tok, &claims) != nil || claims.Exp == 0 {
		return time.Time{}
	}
	return time.Unix(claims.Exp, 0)
}

// authorize sets the rest_auth/jwt headers of req.
func authorize(req *http.Request, c Credentials) {
	req.Header.Set("X-SLURM-USER-NAME", c.User)
	req.Header.Set("X-SLURM-USER-TOKEN", c.Token)
}

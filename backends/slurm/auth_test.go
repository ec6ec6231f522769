package slurm

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"testing"
	"time"
)

// TestSigningKeyUsedByteForByte: jwt_hs256.key is binary; one that ends in
// 0x0A (or holds white space) must sign with every byte, as slurmctld
// verifies with every byte.
func TestSigningKeyUsedByteForByte(t *testing.T) {
	for name, key := range map[string][]byte{
		"ends in 0x0A":       append([]byte("\x00\x01binary-key-0123456789\xff"), '\n'),
		"ends in two 0x0A":   []byte("\x10\x20binary-key-0123456789\n\n"),
		"white space around": []byte(" \tbinary-key-0123456789 \r\n"),
	} {
		t.Run(name, func(t *testing.T) {
			s := &SigningKeySource{Key: func(context.Context) ([]byte, error) { return key, nil },
				Now: func() time.Time { return time.Unix(1_700_000_000, 0) }}
			c, err := s.Credentials(context.Background(), "alice")
			if err != nil {
				t.Fatal(err)
			}
			parts := strings.Split(c.Token, ".")
			if len(parts) != 3 {
				t.Fatalf("token has %d parts", len(parts))
			}
			mac := hmac.New(sha256.New, key)
			mac.Write([]byte(parts[0] + "." + parts[1]))
			if base64.RawURLEncoding.EncodeToString(mac.Sum(nil)) != parts[2] {
				t.Error("the signature does not verify with the whole key")
			}
		})
	}
}

// TestStaticTokenTrimmed: a token is text, and a file's line end or
// scontrol's SLURM_JWT= prefix is not part of it.
func TestStaticTokenTrimmed(t *testing.T) {
	tok, _ := signHS256([]byte("k"), map[string]any{"exp": time.Now().Add(time.Hour).Unix(), "sun": "slurm"})
	for _, raw := range []string{tok + "\n", "SLURM_JWT=" + tok + "\n", "  " + tok + "\r\n"} {
		s := &StaticTokenSource{Token: func(context.Context) ([]byte, error) { return []byte(raw), nil }}
		c, err := s.Credentials(context.Background(), "alice")
		if err != nil || c.Token != tok {
			t.Errorf("from %q: token %q, %v; want %q", raw, c.Token, err, tok)
		}
	}
}

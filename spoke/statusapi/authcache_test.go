package statusapi

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

// countingAuth accepts the tokens of accept and counts the reviews.
type countingAuth struct {
	accept  map[string]Caller
	reviews int
}

func (a *countingAuth) Authenticate(_ context.Context, token, _, _ string) (Caller, error) {
	a.reviews++
	if c, ok := a.accept[token]; ok {
		return c, nil
	}
	return Caller{}, ErrBadToken
}

// TestCachedAuth: an accepted token is reviewed once per TTL and for its
// own path only; a refused one each time; the cache holds at most Size
// tokens, and never the token itself.
func TestCachedAuth(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(now)
	good := Caller{Dispatch: "uid-train", Attempt: 2}
	inner := &countingAuth{accept: map[string]Caller{"good": good}}
	c := &CachedAuth{Auth: inner, TTL: 30 * time.Second, Size: 3, Clock: clk}
	ctx := context.Background()
	call := func(token, name string) (Caller, error) { return c.Authenticate(ctx, token, "team-a", name) }

	for i := 0; i < 5; i++ {
		if got, err := call("good", "train"); err != nil || got != good {
			t.Fatalf("Authenticate = %+v, %v", got, err)
		}
	}
	if inner.reviews != 1 {
		t.Errorf("5 reports within the TTL took %d reviews, want 1", inner.reviews)
	}
	if _, err := call("good", "other"); err != nil {
		t.Fatal(err)
	}
	if inner.reviews != 2 {
		t.Errorf("another path answered from the cache (%d reviews, want 2)", inner.reviews)
	}
	for i := 0; i < 3; i++ {
		if _, err := call("bad", "train"); !errors.Is(err, ErrBadToken) {
			t.Fatalf("bad token: %v", err)
		}
	}
	if inner.reviews != 5 {
		t.Errorf("a refused token was remembered (%d reviews, want 5)", inner.reviews)
	}
	clk.SetTime(now.Add(30 * time.Second))
	if _, err := call("good", "train"); err != nil || inner.reviews != 6 {
		t.Errorf("after the TTL: %v, %d reviews; want reviewed again (6)", err, inner.reviews)
	}

	for i := 0; i < 10; i++ {
		tok := fmt.Sprintf("pod-%d", i)
		inner.accept[tok] = Caller{Dispatch: types.UID(tok), Attempt: 1}
		if _, err := call(tok, "train"); err != nil {
			t.Fatal(err)
		}
		if n := c.Len(); n > 3 {
			t.Fatalf("cache holds %d tokens, want at most 3", n)
		}
	}
	for k := range c.entries {
		for _, tok := range []string{"good", "pod-9"} {
			if string(k[:len(tok)]) == tok {
				t.Errorf("the cache keeps the token %q in the clear", tok)
			}
		}
	}
	// The newest is kept, the oldest went.
	before := inner.reviews
	if _, err := call("pod-9", "train"); err != nil || inner.reviews != before {
		t.Errorf("the newest token was reviewed again (%d -> %d)", before, inner.reviews)
	}
	if _, err := call("pod-0", "train"); err != nil || inner.reviews != before+1 {
		t.Errorf("the oldest token was kept past the size bound")
	}
}

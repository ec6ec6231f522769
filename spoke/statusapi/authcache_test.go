package statusapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/kubeflow/trainer/v2/pkg/statusserver"
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

// TestCachedAuthBoundsReviews: past its review budget CachedAuth answers
// ErrBusy without asking (a flood of bad tokens is not a flood of
// TokenReviews), still answers what it has cached, and asks again once the
// budget refills; the endpoint answers ErrBusy 429 with Retry-After.
func TestCachedAuthBoundsReviews(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(now)
	good := Caller{Dispatch: "uid-train", Attempt: 2}
	inner := &countingAuth{accept: map[string]Caller{"good": good}}
	c := &CachedAuth{Auth: inner, TTL: time.Minute, Size: 10, Clock: clk, ReviewRate: 1, ReviewBurst: 2}
	ctx := context.Background()
	if _, err := c.Authenticate(ctx, "good", "team-a", "train"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Authenticate(ctx, "bad-1", "team-a", "train"); !errors.Is(err, ErrBadToken) {
		t.Fatalf("second review: %v", err)
	}
	for i := 0; i < 5; i++ {
		if _, err := c.Authenticate(ctx, fmt.Sprintf("flood-%d", i), "team-a", "train"); !errors.Is(err, ErrBusy) {
			t.Fatalf("over the budget: %v, want ErrBusy", err)
		}
	}
	if inner.reviews != 2 {
		t.Errorf("%d reviews asked, want the budget's 2", inner.reviews)
	}
	if got, err := c.Authenticate(ctx, "good", "team-a", "train"); err != nil || got != good {
		t.Errorf("a cached token while busy: %+v, %v", got, err)
	}
	clk.SetTime(now.Add(time.Second))
	if _, err := c.Authenticate(ctx, "bad-2", "team-a", "train"); !errors.Is(err, ErrBadToken) || inner.reviews != 3 {
		t.Errorf("a second later: %v after %d reviews, want reviewed (3)", err, inner.reviews)
	}

	srv := httptest.NewTLSServer((&Server{Target: "slurm-1", Auth: c, Dispatches: dispatchMap{}, Reports: NewReports(0),
		Log: logr.Discard()}).Handler())
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+statusserver.StatusUrl("team-a", "train"), strings.NewReader(validBody))
	req.Header.Set("Authorization", "Bearer flood-x")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("busy: %d Retry-After %q, want 429 and 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

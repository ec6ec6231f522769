package statusapi

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Defaults of CachedAuth.
const (
	// DefaultAuthCacheTTL is how long an accepted token is taken on its
	// review: a job reporting every second costs one TokenReview (and one
	// pod read) per pod per 30 s, and a token whose pod is deleted is
	// refused at most 30 s later (its Dispatch and attempt are checked
	// on every request all the same).
	DefaultAuthCacheTTL = 30 * time.Second
	// DefaultAuthCacheSize bounds the accepted tokens kept: one per pod
	// that reports, so 8,192 pods reporting within a TTL before the oldest
	// entry is reviewed again (about 1 MiB).
	DefaultAuthCacheSize = 8192
	// DefaultReviewRate and DefaultReviewBurst bound the reviews CachedAuth
	// asks for, all jobs together (a flood of bad tokens from a tenant's
	// pods would otherwise be a flood of TokenReviews on the spoke's API
	// server); past them a report is answered 429 like one over its job's
	// budget.
	DefaultReviewRate  = 50.0
	DefaultReviewBurst = 100
)

// ErrBusy: the credential was not checked, as too many were just now.
var ErrBusy = errors.New("too many status credentials to check")

// CachedAuth remembers, for TTL, the tokens Auth accepted, keyed by the
// SHA-256 of token and path (the token itself is never kept or logged).
// Refusals are not remembered: a token refused once is reviewed again, so
// a pod that has just started is not kept out by a stale answer.
type CachedAuth struct {
	Auth  Authenticator
	TTL   time.Duration
	Size  int
	Clock clock.PassiveClock
	// ReviewRate (a second) and ReviewBurst bound the calls to Auth; 0:
	// unbounded.
	ReviewRate  float64
	ReviewBurst int

	mu      sync.Mutex
	entries map[[sha256.Size]byte]cachedCaller
	reviews *bucket
	// kept numbers the entries in the order they were kept, so that of
	// two expiring together the older goes first.
	kept uint64
}

type cachedCaller struct {
	caller  Caller
	expires time.Time
	seq     uint64
}

// NewCachedAuth caches auth's acceptances with the defaults.
func NewCachedAuth(auth Authenticator) *CachedAuth {
	return &CachedAuth{Auth: auth, TTL: DefaultAuthCacheTTL, Size: DefaultAuthCacheSize, Clock: clock.RealClock{},
		ReviewRate: DefaultReviewRate, ReviewBurst: DefaultReviewBurst}
}

// Authenticate answers from the cache, or asks Auth and keeps what it
// accepts.
func (c *CachedAuth) Authenticate(ctx context.Context, token, namespace, name string) (Caller, error) {
	key := cacheKey(token, namespace, name)
	now := c.Clock.Now()
	c.mu.Lock()
	e, ok := c.entries[key]
	busy := false
	if !ok || !now.Before(e.expires) {
		busy = c.spendReview(now)
	}
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.caller, nil
	}
	if busy {
		return Caller{}, ErrBusy
	}
	caller, err := c.Auth.Authenticate(ctx, token, namespace, name)
	if err != nil {
		return caller, err
	}
	c.put(key, cachedCaller{caller: caller, expires: now.Add(c.TTL)}, now)
	return caller, nil
}

// spendReview takes one review from the budget; true when none is left.
// c.mu is held.
func (c *CachedAuth) spendReview(now time.Time) bool {
	if c.ReviewRate <= 0 {
		return false
	}
	if c.reviews == nil {
		c.reviews = &bucket{tokens: float64(max(c.ReviewBurst, 1)), at: now}
	}
	return c.reviews.take(now, c.ReviewRate, c.ReviewBurst) > 0
}

// Len is the number of tokens kept, for tests and bounds.
func (c *CachedAuth) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// put keeps e, making room first: expired entries go, then, if it is still
// full, the one closest to expiring (of those, the one kept first).
func (c *CachedAuth) put(key [sha256.Size]byte, e cachedCaller, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[[sha256.Size]byte]cachedCaller{}
	}
	if _, ok := c.entries[key]; !ok && len(c.entries) >= max(c.Size, 1) {
		var oldest [sha256.Size]byte
		var first *cachedCaller
		for k, x := range c.entries {
			if !now.Before(x.expires) {
				delete(c.entries, k)
				continue
			}
			if first == nil || x.expires.Before(first.expires) || x.expires.Equal(first.expires) && x.seq < first.seq {
				oldest, first = k, &x
			}
		}
		if len(c.entries) >= max(c.Size, 1) {
			delete(c.entries, oldest)
		}
	}
	c.kept++
	e.seq = c.kept
	c.entries[key] = e
}

// cacheKey hashes the token with the TrainJob it speaks for: a token is
// accepted for one audience, so it is cached for that path only.
func cacheKey(token, namespace, name string) [sha256.Size]byte {
	h := sha256.New()
	for _, s := range []string{token, namespace, name} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	var k [sha256.Size]byte
	copy(k[:], h.Sum(nil))
	return k
}

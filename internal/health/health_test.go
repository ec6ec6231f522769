package health

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/onsi/gomega"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// TestCachesSynced: a cache that has not started is not ready; once started,
// it is ready when its informers synced (here: it has none).
func TestCachesSynced(t *testing.T) {
	// No API server answers here; nothing in this test needs one.
	c, err := cache.New(&rest.Config{Host: "http://127.0.0.1:1"}, cache.Options{Scheme: runtime.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	check := CachesSynced(c)
	start := time.Now()
	if err := check(httptest.NewRequest("GET", "/readyz", nil)); !errors.Is(err, ErrCachesNotSynced) {
		t.Fatalf("before start: %v, want %v", err, ErrCachesNotSynced)
	}
	if waited := time.Since(start); waited > 2*CacheSyncWait {
		t.Errorf("the check waited %s, more than its bound %s", waited, CacheSyncWait)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = c.Start(ctx) }()
	// A started cache without informers is ready.
	gomega.NewWithT(t).Eventually(func() error {
		return check(httptest.NewRequest("GET", "/readyz", nil))
	}, 10*time.Second, 50*time.Millisecond).Should(gomega.Succeed())
}

// Package health holds the readiness checks trainyard's managers serve on
// /readyz beside controller-runtime's own (the webhook server's
// StartedChecker). /healthz stays a liveness ping: a process whose caches
// lag or whose hub is unreachable is not ready, but restarting it would not
// help.
package health

import (
	"context"
	"errors"
	"net/http"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// CacheSyncWait bounds how long one probe waits for the caches; the
// kubelet's probe timeout is one second by default.
const CacheSyncWait = 500 * time.Millisecond

// ErrCachesNotSynced is the check's answer while an informer has not synced
// or a cache has not started.
var ErrCachesNotSynced = errors.New("caches not synced")

// CachesSynced is ready once every cache has started and each of its
// informers has synced. Informers added later (a controller that starts on
// election, a kind read for the first time) make it wait for them again.
func CachesSynced(caches ...cache.Cache) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), CacheSyncWait)
		defer cancel()
		for _, c := range caches {
			if !c.WaitForCacheSync(ctx) {
				return ErrCachesNotSynced
			}
		}
		return nil
	}
}

package bench

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	jobset "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
)

// arrivals times jobs from their creation on the hub to the moment their
// remote JobSet first shows up in a watch on the spoke (or MultiKueue
// worker) that got it. Both sides are clocked in this process, so the
// figures are free of the API servers' one-second creation timestamps.
type arrivals struct {
	mu      sync.Mutex
	created map[string]time.Time
	remote  map[string]time.Time
	first   time.Time
	last    time.Time // the end of the last create
	retries int
}

func newArrivals() *arrivals {
	return &arrivals{created: map[string]time.Time{}, remote: map[string]time.Time{}}
}

// create records that the job with key was created at t (the start of the
// create call that succeeded).
func (a *arrivals) create(key string, t time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.created[key] = t
	if a.first.IsZero() || t.Before(a.first) {
		a.first = t
	}
	a.last = time.Now()
}

// retried counts a create that had to be tried again.
func (a *arrivals) retried() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.retries++
}

func (a *arrivals) seen(key string, t time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.remote[key]; !ok {
		a.remote[key] = t
	}
}

func (a *arrivals) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.remote)
}

// watch starts a JobSet informer on cluster until ctx ends; key names the
// hub job a remote JobSet belongs to ("" for JobSets of no job).
func (a *arrivals) watch(ctx context.Context, b *testing.B, cluster *kube.Cluster, key func(*jobset.JobSet) string) {
	c, err := cache.New(cluster.Config, cache.Options{Scheme: kube.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	inf, err := c.GetInformer(ctx, &jobset.JobSet{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if js, ok := obj.(*jobset.JobSet); ok {
			if k := key(js); k != "" {
				a.seen(k, time.Now())
			}
		}
	}}); err != nil {
		b.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		b.Fatalf("%s: JobSet watch did not sync", cluster.Name)
	}
}

// result is one side's figures: jobs/s from the first creation to the last
// remote JobSet, and percentiles of creation to remote JobSet per job.
type result struct {
	n             int
	took          time.Duration
	p50, p95, p99 time.Duration
	// creating is how long the creates took, retries how many were tried
	// again.
	creating time.Duration
	retries  int
	// cpu is the CPU time per job of the fleet's parts (cpuMeter.cell).
	cpu string
	// hubAPI is the hub API server's requests over the round.
	hubAPI apiRequests
}

func (a *arrivals) result() result {
	a.mu.Lock()
	defer a.mu.Unlock()
	var last time.Time
	var lat []time.Duration
	for k, t := range a.remote {
		c, ok := a.created[k]
		if !ok {
			continue
		}
		lat = append(lat, t.Sub(c))
		if t.After(last) {
			last = t
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(q float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(q*float64(len(lat))))]
	}
	return result{n: len(lat), took: last.Sub(a.first), p50: pct(0.50), p95: pct(0.95), p99: pct(0.99),
		creating: a.last.Sub(a.first), retries: a.retries}
}

// waitArrived waits until n remote JobSets were seen, checking that the
// fleet's components are alive while it waits.
func (a *arrivals) waitArrived(b *testing.B, what string, n int, timeout time.Duration, clusters ...*kube.Cluster) {
	deadline := time.Now().Add(timeout)
	for a.count() < n {
		if time.Now().After(deadline) {
			b.Fatalf("%s: %d of %d remote JobSets after %s", what, a.count(), n, timeout)
		}
		for _, c := range clusters {
			if err := c.CheckAlive(); err != nil {
				b.Fatal(err)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

// envInt reads a positive integer setting of the bench, or def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

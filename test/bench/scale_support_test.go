package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobset "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
)

// completer plays the spokes' execution system once enabled: it writes
// the Completed condition of every remote JobSet, as the JobSet controller
// would when its jobs end.
type completer struct {
	enabled atomic.Bool
	done    atomic.Int64
	keys    chan completion
	mu      sync.Mutex
	seen    []completion
}

type completion struct {
	c   client.Client
	key client.ObjectKey
}

const completerWorkers = 4

func newCompleter(ctx context.Context, b *testing.B, fleet *kube.Fleet) *completer {
	cp := &completer{keys: make(chan completion, 100000)}
	for _, s := range fleet.Spokes {
		c, err := cache.New(s.Config, cache.Options{Scheme: kube.Scheme()})
		if err != nil {
			b.Fatal(err)
		}
		inf, err := c.GetInformer(ctx, &jobset.JobSet{})
		if err != nil {
			b.Fatal(err)
		}
		spoke := s.Client
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
			if js, ok := obj.(*jobset.JobSet); ok {
				cp.add(completion{c: spoke, key: client.ObjectKeyFromObject(js)})
			}
		}}); err != nil {
			b.Fatal(err)
		}
		go func() { _ = c.Start(ctx) }()
		for range completerWorkers {
			go cp.work(ctx)
		}
	}
	return cp
}

// add queues a JobSet once completion is on, and remembers it until then.
func (cp *completer) add(k completion) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.enabled.Load() {
		cp.keys <- k
		return
	}
	cp.seen = append(cp.seen, k)
}

// enable completes every JobSet seen so far and every later one.
func (cp *completer) enable() {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.enabled.Store(true)
	for _, k := range cp.seen {
		cp.keys <- k
	}
	cp.seen = nil
}

func (cp *completer) count() int { return int(cp.done.Load()) }

func (cp *completer) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case k := <-cp.keys:
			if complete(ctx, k) == nil {
				cp.done.Add(1)
			}
		}
	}
}

func complete(ctx context.Context, k completion) error {
	return retry.OnError(retry.DefaultBackoff, func(error) bool { return ctx.Err() == nil }, func() error {
		var js jobset.JobSet
		if err := k.c.Get(ctx, k.key, &js); err != nil {
			return client.IgnoreNotFound(err)
		}
		apimeta.SetStatusCondition(&js.Status.Conditions, metav1.Condition{Type: string(jobset.JobSetCompleted),
			Status: metav1.ConditionTrue, Reason: "AllJobsCompleted", Message: "completed by the bench"})
		js.Status.TerminalState = string(jobset.JobSetCompleted)
		return k.c.Status().Update(ctx, &js)
	})
}

// waitQuotaReserved waits until Kueue holds quota for n Workloads in the
// bench's ClusterQueue, so Kueue is at rest.
func waitQuotaReserved(b *testing.B, hub *kube.Cluster, n int) {
	waitFor(b, "Kueue reserving quota for every job", func() (int, error) {
		var cq kueue.ClusterQueue
		if err := hub.Client.Get(context.Background(), client.ObjectKey{Name: "cq"}, &cq); err != nil {
			return 0, err
		}
		return int(cq.Status.ReservingWorkloads), nil
	}, n)
}

// waitQueueDrained waits until the bench's ClusterQueue holds no quota,
// so every job of a round finished on the hub too: the cost of a round
// read after it covers each job's whole life.
func waitQueueDrained(b *testing.B, hub *kube.Cluster) {
	waitFor(b, "Kueue releasing every job's quota", func() (int, error) {
		var cq kueue.ClusterQueue
		if err := hub.Client.Get(context.Background(), client.ObjectKey{Name: "cq"}, &cq); err != nil {
			return 0, err
		}
		return -int(cq.Status.ReservingWorkloads + cq.Status.AdmittedWorkloads), nil
	}, 0)
}

// quietWindow is a stretch with jobs waiting and nothing else happening
// on the hub but the agents' Target status writes.
type quietWindow struct {
	took       time.Duration
	writes     int
	reconciles float64
	rssAfter   float64
	heapAfter  float64
}

// fanOut counts Target status writes (a watch on the hub) and the hub's
// dispatch reconciles over d.
func fanOut(ctx context.Context, b *testing.B, hub *kube.Cluster, h *hubProcess, d time.Duration) quietWindow {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c, err := cache.New(hub.Config, cache.Options{Scheme: kube.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	inf, err := c.GetInformer(ctx, &v1alpha1.Target{})
	if err != nil {
		b.Fatal(err)
	}
	var writes atomic.Int64
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{UpdateFunc: func(o, n any) {
		if o.(*v1alpha1.Target).ResourceVersion != n.(*v1alpha1.Target).ResourceVersion {
			writes.Add(1)
		}
	}}); err != nil {
		b.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		b.Fatal("Target watch did not sync")
	}
	before := h.last()
	time.Sleep(d)
	after := h.last()
	return quietWindow{took: after.at.Sub(before.at), writes: int(writes.Load()),
		reconciles: after.reconciles - before.reconciles, rssAfter: after.rss, heapAfter: after.heap}
}

// scaleReport is what one scale round measured.
type scaleReport struct {
	total, slots, queued int
	created              time.Duration
	filled, end          sample
	quiet                quietWindow
	windows              []window
	peak                 float64
	completed            int
	took                 time.Duration
}

// scaleRows adds the round's rows to the table: the fill, the first and
// last drain windows, the hub's memory and the fan-out of Target writes.
func scaleRows(r scaleReport) {
	pad := func(cells []string, notes string) []string {
		for len(cells) < 10 {
			cells = append(cells, "")
		}
		return append(cells[:10], notes)
	}
	if len(r.windows) == 0 {
		return
	}
	fill := r.windows[0]
	row(pad(append(windowCells(fmt.Sprintf("Scale: first %d placed, %d more waiting", r.slots, r.queued), fill, nil),
		costCells(fill.before, fill.after)...), fmt.Sprintf("%d TrainJobs created in %.0f s", r.total, r.created.Seconds()))...)
	if len(r.windows) > 2 {
		first, last := r.windows[1], r.windows[len(r.windows)-1]
		row(pad(append(windowCells(fmt.Sprintf("Scale: decisions %d-%d (drain start)", first.from, first.to), first, nil),
			costCells(first.before, first.after)...), "")...)
		row(pad(append(windowCells(fmt.Sprintf("Scale: decisions %d-%d (%d finished Dispatches)", last.from, last.to, last.from-r.slots), last, &first),
			costCells(last.before, last.after)...), fmt.Sprintf("%d JobSets completed by the bench", r.completed))...)
	}
	q := r.quiet
	row(pad([]string{"Scale: hub process memory", fmt.Sprint(r.total)},
		fmt.Sprintf("RSS %s with %d waiting, peak %s, %s at the end; Go heap in use %s with them waiting, %s at the end",
			mib(q.rssAfter), r.queued, mib(r.peak), mib(r.end.rss), mib(q.heapAfter), mib(r.end.heap)))...)
	per := "-"
	if q.writes > 0 {
		per = fmt.Sprintf("%.2f", q.reconciles/float64(q.writes))
	}
	// Every dispatch reconcile of the minute counts, whatever woke it (the
	// tail of Kueue's reservations too): the ratio bounds the fan-out.
	row(pad([]string{"Scale: Target status fan-out", fmt.Sprint(r.queued)},
		fmt.Sprintf("at most %s dispatch reconciles per Target status write (%d writes, %.0f reconciles of any cause in %.0f s, %d jobs waiting); round took %.0f s",
			per, q.writes, q.reconciles, q.took.Seconds(), r.queued, r.took.Seconds()))...)
}

// windowCells are the rate cells of a window, with the ratio of its rate
// to base's when given.
func windowCells(what string, w window, base *window) []string {
	took := w.end.Sub(w.start)
	cells := []string{what, fmt.Sprint(w.to - w.from), fmt.Sprintf("%.1f", took.Seconds()), fmt.Sprintf("%.1f", w.rate()), ""}
	if base != nil {
		cells[4] = fmt.Sprintf("%.2f", w.rate()/base.rate())
	}
	return cells
}

// stallDiagnosis says where a round's jobs are when the hub stops
// dispatching: Dispatches by target and phase (and queued), Workloads by
// trainyard's check state and the start of its message, and the hub's
// trainyard_ gauges.
func stallDiagnosis(ctx context.Context, hub *kube.Cluster, h *hubProcess) string {
	var out strings.Builder
	var ds v1alpha1.DispatchList
	if err := hub.Client.List(ctx, &ds); err != nil {
		fmt.Fprintf(&out, "dispatches: %v\n", err)
	}
	byPhase := map[string]int{}
	for _, d := range ds.Items {
		k := fmt.Sprintf("%s %s queued=%s deleting=%v", d.Spec.TargetName, d.Status.Phase, d.Annotations[v1alpha1.AnnotationQueued], !d.DeletionTimestamp.IsZero())
		byPhase[k]++
	}
	var wls kueue.WorkloadList
	if err := hub.Client.List(ctx, &wls, client.InNamespace(sideBySideNS)); err != nil {
		fmt.Fprintf(&out, "workloads: %v\n", err)
	}
	byCheck := map[string]int{}
	for _, wl := range wls.Items {
		k := "no check"
		for _, c := range wl.Status.AdmissionChecks {
			msg := c.Message
			if len(msg) > 60 {
				msg = msg[:60]
			}
			k = fmt.Sprintf("%s %q", c.State, msg)
		}
		if apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadFinished) {
			k = "finished"
		}
		byCheck[k]++
	}
	for _, m := range []map[string]int{byPhase, byCheck} {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&out, "%6d %s\n", m[k], k)
		}
	}
	if metrics, err := metricsText(ctx, h.url); err == nil {
		for _, line := range strings.Split(metrics, "\n") {
			if strings.HasPrefix(line, "trainyard_") && !strings.Contains(line, "_bucket") {
				out.WriteString(line + "\n")
			}
		}
	}
	return out.String()
}

// metricsText is the /metrics exposition at url.
func metricsText(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	return string(raw), err
}

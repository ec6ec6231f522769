package chaos

import (
	"context"
	"fmt"
	"maps"
	"math/rand"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/dispatch"
)

const (
	// jobs in the burst; slurmShare of them go to Slurm.
	jobs       = 100
	slurmShare = 0.3
	// minKills SIGKILLs at the least, maxKills at the most.
	minKills = 20
	maxKills = 30
	// longDownShare of the kills keep the process down past the lease, for
	// at most longDownMax.
	longDownShare = 0.35
	longDownMax   = 10 * time.Second
	// burstTimeout bounds the wait for every TrainJob to succeed.
	burstTimeout = 5 * time.Minute
)

// kubeRunFor are the kwok run times of the spokes' jobs, slurmSleep the
// Slurm jobs' sleeps: some end within a lease, some outlive it.
var (
	kubeRunFor = []string{"3s", "8s", "15s"}
	slurmSleep = []string{"2", "6", "12"}
)

// TestSIGKILLDuringBurst: 100 TrainJobs on two kwok spokes and Slurm while
// hub and agent replicas are killed with SIGKILL at random moments, at
// least minKills times. Every job succeeds exactly once, never two copies
// at a time, and none restarts unless its target was really lost.
func TestSIGKILLDuringBurst(t *testing.T) {
	g := NewWithT(t)
	seed := time.Now().UnixNano()
	if s := os.Getenv("TRAINYARD_CHAOS_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseInt(s, 10, 64)
		g.Expect(err).NotTo(HaveOccurred(), "TRAINYARD_CHAOS_SEED")
	}
	fmt.Printf("chaos seed %d (TRAINYARD_CHAOS_SEED=%d repeats the choices)\n", seed, seed)
	rng := rand.New(rand.NewSource(seed))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var burst []*trainer.TrainJob
	for i := range jobs {
		name := fmt.Sprintf("chaos-%03d", i)
		if rng.Float64() < slurmShare {
			burst = append(burst, slurmJob(t, name, slurmSleep[rng.Intn(len(slurmSleep))]))
			continue
		}
		burst = append(burst, kubeJob(t, name, kubeRunFor[rng.Intn(len(kubeRunFor))]))
	}

	rec, err := startRecorder(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	t0 := time.Now()
	m := newMonkey(rng)
	monkeyDone := make(chan struct{})
	go func() {
		defer close(monkeyDone)
		m.run(ctx)
	}()
	submitAll(t, burst)
	fmt.Printf("submitted %d TrainJobs in %v\n", len(burst), time.Since(t0).Round(100*time.Millisecond))

	g.Eventually(func(g Gomega) {
		done := 0
		for _, tj := range burst {
			var cur trainer.TrainJob
			g.Expect(env.fleet.Hub.Client.Get(ctx, client.ObjectKeyFromObject(tj), &cur)).To(Succeed())
			g.Expect(apimeta.IsStatusConditionTrue(cur.Status.Conditions, trainer.TrainJobFailed)).To(BeFalse(),
				"%s failed: %v", tj.Name, cur.Status.Conditions)
			if apimeta.IsStatusConditionTrue(cur.Status.Conditions, trainer.TrainJobComplete) {
				done++
			}
		}
		m.setDone(done == len(burst))
		g.Expect(done).To(Equal(len(burst)), "TrainJobs complete")
		g.Expect(m.finished()).To(BeTrue(), "the monkey has killed %d times", m.total())
	}, burstTimeout, time.Second).Should(Succeed())
	<-monkeyDone
	burstTime := time.Since(t0)

	// Once everything is up again, nothing is left running anywhere and
	// no quota is held.
	g.Eventually(func(g Gomega) {
		copies, _, _ := rec.snapshot()
		for _, c := range copies {
			g.Expect(c.live()).To(BeFalse(), "remote copy %s of workload %s is still live", c.Where, c.Workload)
		}
		g.Expect(clusterQueuesIdle(ctx)).To(Succeed())
	}, 2*time.Minute, time.Second).Should(Succeed())
	g.Expect(rec.pollSlurm(ctx)).To(Succeed(), "a last read of every Slurm job")

	copies, samples, violations := rec.snapshot()
	silence := rec.longestSilence(t0, t0.Add(burstTime))
	wls := workloadsOf(g, burst)
	events := tenantEvents(g)
	summary(m, copies, samples, requeueEvents(events), burstTime, silence)
	fmt.Printf("  %d jobs succeeded on a target whose lease was lost at that moment\n", rec.succeededSilent(copies))
	printRepeats(copies, wls, rec.start, events)
	g.Expect(violations).To(BeEmpty(), "samples with two live copies of one job")
	for _, p := range env.procs {
		g.Expect(p.Crashes()).To(BeEmpty(), "%s exited without being killed", p.Name)
	}
	g.Expect(m.total()).To(BeNumerically(">=", minKills))
	// Only a Requeue target's agent stops its work, and only then does the
	// hub requeue it.
	var targets v1alpha1.TargetList
	g.Expect(env.fleet.Hub.Client.List(ctx, &targets)).To(Succeed())
	lost := map[string]bool{}
	for _, tg := range targets.Items {
		lost[tg.Name] = tg.Spec.LeaseLoss == v1alpha1.LeaseLossRequeue && silence[tg.Name].Length >= fenceAfter-evidenceLag
	}
	if skipped := checkOnce(t, copies, wls, events, lost); len(skipped) > 0 {
		fmt.Printf("  attempt numbers skipped by a hub killed mid-dispatch (nothing ran): %s\n", strings.Join(skipped, ", "))
	}
}

// checkOnce asserts that every job of the burst ran to success exactly
// once: exactly one of its remote copies and one of its Dispatches
// succeeded. None may restart (a second copy, a requeue) unless its first
// copy ran on a lost target, a Requeue target that went without a renewal
// for the fence deadline: its agent may have stopped the job, and then
// each copy after the first follows a requeue. No agent may refuse a job.
// An attempt above 1 is a restart unless it is the job's only copy and
// nothing requeued or refused an earlier one: a hub killed between
// numbering an attempt and writing its Dispatch leaves the number skipped
// (hub/dispatch start_attempt.go), and nothing ran. It returns those jobs.
func checkOnce(t *testing.T, copies []remoteCopy, wls map[string]string, events []corev1.Event, lost map[string]bool) (skipped []string) {
	t.Helper()
	byWorkload := map[string][]remoteCopy{}
	for _, c := range copies {
		if _, ok := wls[c.Workload]; !ok {
			t.Errorf("remote copy %s belongs to no TrainJob of the burst", c.Where)
			continue
		}
		byWorkload[c.Workload] = append(byWorkload[c.Workload], c)
	}
	requeued, refused := eventsByWorkload(events, dispatch.EventRequeued), eventsByWorkload(events, dispatch.EventRefused)
	for uid, tj := range wls {
		cs := byWorkload[uid]
		sort.Slice(cs, func(i, j int) bool { return cs[i].Created.Before(cs[j].Created) })
		if len(cs) == 0 {
			t.Errorf("%s ran nowhere", tj)
			continue
		}
		attempt := oneSuccess(t, tj, uid, cs)
		story := fmt.Sprintf("attempt %d, %d requeues, %d refusals, copies %s\n%s",
			attempt, requeued[uid], refused[uid], describeCopies(cs), workloadEvents(events, uid))
		switch {
		case refused[uid] > 0:
			t.Errorf("%s was refused by a target: %s", tj, story)
		case !lost[cs[0].Target] && (len(cs) > 1 || requeued[uid] > 0):
			t.Errorf("%s restarted though target %s was never lost: %s", tj, cs[0].Target, story)
		case len(cs) > 1+requeued[uid]:
			t.Errorf("%s: more remote copies than requeues: %s", tj, story)
		case len(cs) == 1 && attempt > 1 && requeued[uid] == 0:
			if cs[0].Attempt != strconv.Itoa(int(attempt)) {
				t.Errorf("%s: its only copy is not of its last attempt: %s", tj, story)
			}
			skipped = append(skipped, fmt.Sprintf("%s (attempt %d)", tj, attempt))
		}
	}
	sort.Strings(skipped)
	return skipped
}

// oneSuccess asserts that exactly one of cs and one of the Dispatches of
// Workload uid succeeded, and returns its highest attempt.
func oneSuccess(t *testing.T, tj, uid string, cs []remoteCopy) (attempt int32) {
	t.Helper()
	succeeded := 0
	for _, c := range cs {
		if c.Succeeded {
			succeeded++
		}
	}
	if succeeded != 1 {
		t.Errorf("%s: %d remote copies succeeded, want 1: %s", tj, succeeded, describeCopies(cs))
	}
	dispatches, attempt := dispatchesSucceeded(t, uid)
	if dispatches != 1 {
		t.Errorf("%s: %d Dispatches succeeded, want 1", tj, dispatches)
	}
	return attempt
}

// dispatchesSucceeded counts the Dispatches of a Workload that succeeded
// and returns the highest attempt among them all.
func dispatchesSucceeded(t *testing.T, uid string) (succeeded int, attempt int32) {
	t.Helper()
	var list v1alpha1.DispatchList
	if err := env.fleet.Hub.Client.List(context.Background(), &list, client.MatchingLabels{v1alpha1.LabelWorkloadUID: uid}); err != nil {
		t.Fatal(err)
	}
	for _, d := range list.Items {
		if d.Status.Phase == v1alpha1.DispatchSucceeded {
			succeeded++
		}
		attempt = max(attempt, d.Spec.Attempt)
	}
	return succeeded, attempt
}

func describeCopies(cs []remoteCopy) string {
	var parts []string
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("%s attempt %s ok=%v", c.Where, c.Attempt, c.Succeeded))
	}
	return strings.Join(parts, "; ")
}

// tenantEvents reads the Events of the burst's namespace once, for the
// summaries below.
func tenantEvents(g Gomega) []corev1.Event {
	var events corev1.EventList
	g.Expect(env.fleet.Hub.Client.List(context.Background(), &events, client.InNamespace(tenant))).To(Succeed())
	return events.Items
}

// eventsByWorkload counts the hub's events of one reason per Workload UID.
func eventsByWorkload(events []corev1.Event, reason string) map[string]int {
	out := map[string]int{}
	for _, e := range events {
		if e.Reason == reason {
			out[string(e.InvolvedObject.UID)] += max(int(e.Count), 1)
		}
	}
	return out
}

// submitAll creates the TrainJobs from 4 clients at once. A create the
// hub's webhook cannot answer (the hub is down) is retried, as kubectl
// users would.
func submitAll(t *testing.T, burst []*trainer.TrainJob) {
	t.Helper()
	ctx := context.Background()
	next := make(chan *trainer.TrainJob)
	var wg sync.WaitGroup
	errs := make(chan error, len(burst))
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tj := range next {
				deadline := time.Now().Add(2 * time.Minute)
				for {
					err := env.fleet.Hub.Client.Create(ctx, tj)
					if err == nil {
						break
					}
					if time.Now().After(deadline) {
						errs <- fmt.Errorf("create %s: %w", tj.Name, err)
						break
					}
					time.Sleep(500 * time.Millisecond)
				}
			}
		}()
	}
	for _, tj := range burst {
		next <- tj
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Cleanup(func() {
		for _, tj := range burst {
			_ = env.fleet.Hub.Client.Delete(ctx, tj)
		}
	})
}

// workloadsOf maps each TrainJob's Workload UID to the TrainJob's name.
func workloadsOf(g Gomega, burst []*trainer.TrainJob) map[string]string {
	var list kueue.WorkloadList
	g.Expect(env.fleet.Hub.Client.List(context.Background(), &list, client.InNamespace(tenant))).To(Succeed())
	names := map[string]bool{}
	for _, tj := range burst {
		names[tj.Name] = true
	}
	out := map[string]string{}
	for _, wl := range list.Items {
		for _, o := range wl.OwnerReferences {
			if o.Kind == trainer.TrainJobKind && names[o.Name] {
				out[string(wl.UID)] = o.Name
			}
		}
	}
	g.Expect(out).To(HaveLen(len(burst)), "one Workload per TrainJob")
	return out
}

// requeueEvents counts the hub's Requeued events on Workloads, and
// prints how many said what (target names and attempts left out).
func requeueEvents(events []corev1.Event) int {
	n := 0
	why := map[string]int{}
	for _, e := range events {
		if e.Reason == dispatch.EventRequeued {
			n += max(int(e.Count), 1)
			msg := e.Message
			if i := strings.IndexAny(msg, ":0123456789"); i > 0 {
				msg = msg[:i]
			}
			why[msg] += max(int(e.Count), 1)
		}
	}
	for msg, k := range why {
		fmt.Printf("  requeued %d× %q…\n", k, msg)
	}
	return n
}

// printRepeats lists the jobs that had more than one remote copy, each
// copy with its target, attempt and live interval since the burst began.
func printRepeats(copies []remoteCopy, wls map[string]string, start time.Time, events []corev1.Event) {
	by := map[string][]remoteCopy{}
	for _, c := range copies {
		by[c.Workload] = append(by[c.Workload], c)
	}
	var lines []string
	for wl, cs := range by {
		if len(cs) < 2 {
			continue
		}
		sort.Slice(cs, func(i, j int) bool { return cs[i].Created.Before(cs[j].Created) })
		var parts []string
		for _, c := range cs {
			parts = append(parts, fmt.Sprintf("%s#%s [%.1fs, %.1fs] ok=%v", c.Target, c.Attempt,
				c.Created.Sub(start).Seconds(), c.Ended.Sub(start).Seconds(), c.Succeeded))
		}
		lines = append(lines, "  "+wls[wl]+": "+strings.Join(parts, "; ")+"\n"+workloadEvents(events, wl))
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
}

// workloadEvents lists the Events of one Workload, oldest first: why each
// of its attempts was made.
func workloadEvents(events []corev1.Event, uid string) string {
	var out []string
	for _, e := range events {
		if string(e.InvolvedObject.UID) == uid {
			out = append(out, fmt.Sprintf("    %s %s %s: %s", e.FirstTimestamp.Format("15:04:05"), e.Type, e.Reason, e.Message))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// summary prints kills per process, remote creations, requeues, times and
// each target's longest time without a renewal of its Lease.
func summary(m *monkey, copies []remoteCopy, samples, requeues int, burst time.Duration, silences map[string]silence) {
	perTarget := map[string]int{}
	perWorkload := map[string]int{}
	succeeded := map[string]int{}
	for _, c := range copies {
		perTarget[c.Target]++
		perWorkload[c.Workload]++
		if c.Succeeded {
			succeeded[c.Workload]++
		}
	}
	again, twice := 0, 0
	for wl, n := range perWorkload {
		if n > 1 {
			again++
		}
		if succeeded[wl] > 1 {
			twice++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "chaos summary: %d kills in %v (", m.total(), burst.Round(time.Second))
	fmt.Fprint(&b, m.describe())
	fmt.Fprintf(&b, "\n  remote creations: %d for %d jobs (", len(copies), len(perWorkload))
	targets := make([]string, 0, len(perTarget))
	for t := range perTarget {
		targets = append(targets, t)
	}
	sort.Strings(targets)
	for i, t := range targets {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", t, perTarget[t])
	}
	fmt.Fprintf(&b, "); %d jobs had more than one copy, %d ran to success more than once\n", again, twice)
	fmt.Fprintf(&b, "  hub Requeued events: %d; samples: %d\n  longest time without a renewal:", requeues, samples)
	for _, t := range slices.Sorted(maps.Keys(silences)) {
		s := silences[t]
		fmt.Fprintf(&b, " %s %v from +%.1fs;", t, s.Length.Round(100*time.Millisecond), s.From.Seconds())
	}
	fmt.Fprintf(&b, " (fence deadline %v)\n", fenceAfter)
	fmt.Print(b.String())
}

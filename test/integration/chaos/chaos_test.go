package chaos

import (
	"context"
	"fmt"
	"math/rand"
	"os"
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
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/harness/kube"
)

const (
	// jobs in the burst; slurmShare of them go to Slurm.
	jobs       = 100
	slurmShare = 0.3
	// minKills SIGKILLs at the least, maxKills at the most.
	minKills = 20
	maxKills = 40
	// longDownShare of the kills keep the process down past lease + grace.
	longDownShare = 0.35
	// burstTimeout bounds the wait for every TrainJob to succeed.
	burstTimeout = 4 * time.Minute
)

// kubeRunFor are the kwok run times of the spokes' jobs, slurmSleep the
// Slurm jobs' sleeps: some end within a lease, some outlive lease + grace.
var (
	kubeRunFor = []string{"3s", "8s", "15s"}
	slurmSleep = []string{"2", "6", "12"}
)

// TestSIGKILLDuringBurst: 100 TrainJobs on two kwok spokes and Slurm while
// the hub and the agents are killed with SIGKILL at random moments.
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

	for _, d := range kubeRunFor {
		makeRuntime(t, "kube-"+d, tytesting.MakeClusterTrainingRuntime("kube-"+d).Toleration(kube.KwokToleration).
			PodAnnotation("kwok.trainyard.dev/run-for", d).Obj())
	}
	makeRuntime(t, "slurm", tytesting.MakeClusterTrainingRuntime("slurm").Spec(tytesting.TorchRuntimeSpec(1)).Obj())
	var burst []*trainer.TrainJob
	for i := range jobs {
		name := fmt.Sprintf("chaos-%03d", i)
		if rng.Float64() < slurmShare {
			burst = append(burst, tytesting.MakeTrainJob(name, tenant).Queue(hpcQueue).
				RuntimeRef(trainer.ClusterTrainingRuntimeKind, "slurm").NumNodes(1).GPUsPerNode(2).
				Command([]string{"sleep"}, slurmSleep[rng.Intn(len(slurmSleep))]).Obj())
			continue
		}
		burst = append(burst, tytesting.MakeTrainJob(name, tenant).Queue(kubeQueue).
			RuntimeRef(trainer.ClusterTrainingRuntimeKind, "kube-"+kubeRunFor[rng.Intn(len(kubeRunFor))]).
			NumNodes(1).GPUsPerNode(2).Obj())
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
	wls := workloadsOf(g, burst)
	events := tenantEvents(g)
	requeues := requeueEvents(events)
	summary(m, copies, samples, requeues, burstTime)
	printRepeats(copies, wls, rec.start, events)
	g.Expect(violations).To(BeEmpty(), "samples with two live copies of one job")
	for _, p := range env.procs {
		g.Expect(p.Crashes()).To(BeEmpty(), "%s exited without being killed", p.Name)
	}
	g.Expect(m.total()).To(BeNumerically(">=", minKills))

	// Every remote copy belongs to a job of the burst, every job has one,
	// and exactly one attempt of each succeeded.
	byWorkload := map[string][]remoteCopy{}
	for _, c := range copies {
		g.Expect(wls).To(HaveKey(c.Workload), "remote copy %s belongs to no TrainJob of the burst", c.Where)
		byWorkload[c.Workload] = append(byWorkload[c.Workload], c)
	}
	for uid, tj := range wls {
		g.Expect(byWorkload[uid]).NotTo(BeEmpty(), "%s ran nowhere", tj)
		succeeded := 0
		var list v1alpha1.DispatchList
		g.Expect(env.fleet.Hub.Client.List(ctx, &list, client.MatchingLabels{v1alpha1.LabelWorkloadUID: uid})).To(Succeed())
		for _, d := range list.Items {
			if d.Status.Phase == v1alpha1.DispatchSucceeded {
				succeeded++
			}
		}
		g.Expect(succeeded).To(Equal(1), "attempts of %s that succeeded", tj)
	}

	// Every job ran exactly once. The hub never requeued a job on its own
	// judgement of a silent agent (every Target holds its jobs); a second
	// copy is allowed only after the agent itself stopped the first when
	// its lease ran out (it was alive but could not renew in time).
	fenced, judged := requeuesByWorkload(events)
	g.Expect(judged).To(BeEmpty(), "requeues of jobs on a silent Hold target")
	for uid, tj := range wls {
		g.Expect(len(byWorkload[uid])).To(BeNumerically("<=", 1+fenced[uid]),
			"remote copies of %s, of which %d followed its agent's own stop", tj, fenced[uid])
	}
}

// tenantEvents reads the Events of the burst's namespace once, for the
// summaries below.
func tenantEvents(g Gomega) []corev1.Event {
	var events corev1.EventList
	g.Expect(env.fleet.Hub.Client.List(context.Background(), &events, client.InNamespace(tenant))).To(Succeed())
	return events.Items
}

// requeuesByWorkload counts, per Workload UID, the requeues that followed
// an agent's report that it stopped the work for want of a lease, and lists
// those the hub made because it judged a target lost.
func requeuesByWorkload(events []corev1.Event) (fenced map[string]int, judged []string) {
	fenced = map[string]int{}
	for _, e := range events {
		if e.Reason != dispatch.EventRequeued {
			continue
		}
		switch {
		case strings.Contains(e.Message, "lost its lease and stopped attempt"):
			fenced[string(e.InvolvedObject.UID)] += max(int(e.Count), 1)
		case strings.Contains(e.Message, " lost: "):
			judged = append(judged, e.InvolvedObject.Name+": "+e.Message)
		}
	}
	return fenced, judged
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

func makeRuntime(t *testing.T, name string, rt *trainer.ClusterTrainingRuntime) {
	t.Helper()
	ctx := context.Background()
	NewWithT(t).Expect(env.fleet.Hub.Client.Create(ctx, rt)).To(Succeed(), name)
	t.Cleanup(func() { _ = env.fleet.Hub.Client.Delete(ctx, rt) })
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

// summary prints kills per process, remote creations, requeues and times.
func summary(m *monkey, copies []remoteCopy, samples, requeues int, burst time.Duration) {
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
	fmt.Fprintf(&b, ")\n  remote creations: %d for %d jobs (", len(copies), len(perWorkload))
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
	fmt.Fprintf(&b, "); %d jobs had more than one copy, %d ran to success more than once (never at the same time)\n", again, twice)
	fmt.Fprintf(&b, "  hub Requeued events: %d; samples: %d\n", requeues, samples)
	fmt.Print(b.String())
}

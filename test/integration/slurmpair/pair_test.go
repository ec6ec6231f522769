package slurmpair

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends/slurm"
	"github.com/trainyard-dev/trainyard/test/util"
)

// slurmTimeout bounds waits on Slurm: each emulated job start forks a
// slurmstepd on a 2-core machine that also runs a control plane.
const slurmTimeout = 2 * time.Minute

// TestPlacementFitsJobsByFreeNodes: both clusters have 4 free nodes of 4
// GPUs. A 3-node job goes to the first; a 1-node job then fits the node
// left there exactly (best fit), and a second 3-node job only fits the
// other cluster. Each job is submitted once the Target's capacity counts
// the one before: until then the hub may count a job that just started
// twice, in its reported free nodes and in flight (safe, but not best fit). All three run at once, each as one Slurm job on the
// cluster its Dispatch names.
func TestPlacementFitsJobsByFreeNodes(t *testing.T) {
	makeRuntime(t, "spread")
	bigA := submit(t, trainJob("big-a", "spread", 3, "sleep", "60"))
	a := dispatchOf(t, bigA, phaseIs(v1alpha1.DispatchRunning))
	countedByItsTarget(t, &a)
	other := env.sites[0].target
	if a.Spec.TargetName == other {
		other = env.sites[1].target
	}
	small := submit(t, trainJob("small", "spread", 1, "sleep", "60"))
	s := dispatchOf(t, small, phaseIs(v1alpha1.DispatchRunning))
	countedByItsTarget(t, &s)
	bigB := submit(t, trainJob("big-b", "spread", 3, "sleep", "60"))
	b := dispatchOf(t, bigB, phaseIs(v1alpha1.DispatchRunning))

	g := NewWithT(t)
	g.Expect(s.Spec.TargetName).To(Equal(a.Spec.TargetName), "the 1-node job fills the node left beside big-a")
	g.Expect(b.Spec.TargetName).To(Equal(other), "big-b fits only the other cluster")
	for _, c := range []struct {
		tj *trainer.TrainJob
		d  v1alpha1.Dispatch
	}{{bigA, a}, {small, s}, {bigB, b}} {
		for _, st := range env.sites {
			jobs := activeJobsOf(g, st, c.tj)
			if st.target == c.d.Spec.TargetName {
				g.Expect(jobs).To(HaveLen(1), "Slurm jobs of %s on %s", c.tj.Name, st.target)
				g.Expect(fmt.Sprint(jobs[0].JobID)).To(Equal(c.d.Status.Remote.ID))
			} else {
				g.Expect(jobs).To(BeEmpty(), "Slurm jobs of %s on %s", c.tj.Name, st.target)
			}
		}
	}
}

// TestControllerOutageSendsNewWorkToTheOther stops the first cluster's
// slurmctld: its Target turns unavailable and a job submitted meanwhile
// runs on the other cluster and succeeds there; the first cluster gets no
// job of it, and is available again once slurmctld is back.
func TestControllerOutageSendsNewWorkToTheOther(t *testing.T) {
	ctx := context.Background()
	down, up := env.sites[0], env.sites[1]
	if err := down.cluster.StopDaemon(ctx, "slurmctld"); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = down.cluster.StartDaemon(ctx, "slurmctld")
		}
	})
	targetAvailable(t, down.target, metav1.ConditionFalse)

	makeRuntime(t, "outage")
	tj := submit(t, trainJob("during-outage", "outage", 2, "true"))
	d := dispatchOf(t, tj, phaseIs(v1alpha1.DispatchSucceeded))
	g := NewWithT(t)
	g.Expect(d.Spec.TargetName).To(Equal(up.target))
	g.Expect(jobsOf(g, up, tj)).To(HaveLen(1))

	if err := down.cluster.StartDaemon(ctx, "slurmctld"); err != nil {
		t.Fatal(err)
	}
	restarted = true
	targetAvailable(t, down.target, metav1.ConditionTrue)
	g.Expect(jobsOf(g, down, tj)).To(BeEmpty(), "the cluster that was down got a job of %s", tj.Name)
}

// TestCutOffAgentStopsItsSlurmJobsBeforeTheHubRequeues holds the path
// between one cluster's agent and the hub past the fence deadline while a
// job runs there. The job stamps its process lifetime into a file both
// clusters share (stampScript) and, on SIGTERM, checkpoints for a few
// seconds before it exits. The agent cancels its Slurm job at the fence
// deadline; the hub requeues only after that deadline, the agent's stop
// bound (the Target's killWaitSeconds + 15 s; the harness registers no
// killWaitSeconds, so the default 30 stands for the clusters' KillWait of
// 5: conservative) and the grace, onto the other cluster, where the copy
// resumes and finishes. Judged by
// processes: exactly two copies lived, the first ended by SIGTERM, and no
// two lifetimes overlap. Judged by objects: at every sample at most one
// Slurm job of the TrainJob is active on the two clusters together and at
// most one Dispatch is live; after the path heals the job completes
// exactly once.
func TestCutOffAgentStopsItsSlurmJobsBeforeTheHubRequeues(t *testing.T) {
	makeRuntime(t, "cut")
	stamps := sharedFile(t, "/home/alice/cut.stamps", aliceUID)
	tj := submit(t, trainJob("cut", "cut", 1, "bash", "-c", stampScript("/home/alice/cut.stamps")))
	first := dispatchOf(t, tj, phaseIs(v1alpha1.DispatchRunning))
	cut := siteOf(first.Spec.TargetName)
	firstJob := first.Status.Remote.ID
	g := NewWithT(t)
	g.Eventually(func(g Gomega) {
		g.Expect(lifetimes(g, stamps)).To(ConsistOf(HaveField("How", "")), "the first copy has started")
	}, slurmTimeout, util.Interval).Should(Succeed())
	watch := sampleOneCopy(t, tj)

	cutAt := time.Now()
	cut.proxy.Pause(false)
	healed := false
	heal := func() {
		if !healed {
			cut.proxy.Resume()
			healed = true
		}
	}
	t.Cleanup(heal)

	second := dispatchOf(t, tj, func(g Gomega, d *v1alpha1.Dispatch) {
		g.Expect(d.Spec.Attempt).To(BeNumerically(">", first.Spec.Attempt))
		g.Expect(d.Spec.TargetName).NotTo(Equal(cut.target))
		g.Expect(d.Status.Phase).To(BeElementOf(v1alpha1.DispatchRunning, v1alpha1.DispatchSucceeded))
	})
	// The first copy was cancelled by its own agent, still cut off.
	g.Expect(jobsOf(g, cut, tj)).To(ConsistOf(And(
		HaveField("JobID", BeEquivalentTo(atoi(firstJob))),
		HaveField("JobState", ContainElement("CANCELLED")))))
	// The second copy resumes, runs briefly and exits.
	var lives []lifetime
	g.Eventually(func(g Gomega) {
		lives = lifetimes(g, stamps)
		g.Expect(lives).To(HaveLen(2))
		g.Expect(lives[1].How).NotTo(BeEmpty(), "the second copy has ended")
	}, slurmTimeout, util.Interval).Should(Succeed())
	heal()
	targetAvailable(t, cut.target, metav1.ConditionTrue)
	final := dispatchOf(t, tj, phaseIs(v1alpha1.DispatchSucceeded))
	g.Expect(final.Name).To(Equal(second.Name))
	trainJobComplete(t, tj)
	watch()

	lives = lifetimes(g, stamps)
	t.Logf("cut at %s; copies: %v", cutAt.Format(time.StampMicro), lives)
	for i, x := range lives {
		for _, y := range lives[i+1:] {
			g.Expect(x.overlaps(y)).To(BeFalse(), "copies %v and %v ran at once", x, y)
		}
	}
	g.Expect(lives).To(HaveLen(2), "copies that ran")
	a, b := lives[0], lives[1]
	t.Logf("first copy: SIGTERM %v after the cut, ended %v after it; second copy started %v after the first ended",
		a.Term.Sub(cutAt), a.End.Sub(cutAt), b.Start.Sub(a.End))
	g.Expect(a.ID).To(Equal(cut.cluster.Name+"/"+firstJob), "the first copy")
	g.Expect(a.How).To(Equal("SIGTERM"), "the first copy ends by SIGTERM, after its checkpoint")
	g.Expect(a.End.Sub(a.Term)).To(BeNumerically(">=", checkpointFor), "the first copy's checkpoint")
	g.Expect(b.ID).To(HavePrefix(siteOf(second.Spec.TargetName).cluster.Name+"/"), "the second copy")
	g.Expect(b.How).To(Equal("exit"), "the second copy runs to its end")
}

// sampleOneCopy checks, every 200 ms until the returned func is called,
// that at most one Slurm job of tj is active (not pending and not ended)
// on both clusters together and at most one Dispatch of it is live; the
// func fails the test with the first violation.
func sampleOneCopy(t *testing.T, tj *trainer.TrainJob) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var violation string
	var samples int
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			samples++
			if msg := oneCopy(ctx, tj); msg != "" && violation == "" {
				violation = msg
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return func() {
		cancel()
		wg.Wait()
		if violation != "" {
			t.Errorf("two copies at once: %s", violation)
			return
		}
		t.Logf("%d samples of %s, at most one copy in each", samples, tj.Name)
	}
}

// oneCopy returns a violation, or "" (also when a read fails: a sample
// that cannot be read proves nothing either way; a cut-off cluster's
// slurmrestd still answers the test).
func oneCopy(ctx context.Context, tj *trainer.TrainJob) string {
	var running []string
	for _, s := range env.sites {
		jobs, err := s.rest.Jobs(ctx)
		if err != nil {
			return ""
		}
		for _, j := range jobs {
			if ofTrainJob(j, tj) && !slurm.Ended(&j) && !hasState(j, "PENDING") {
				running = append(running, fmt.Sprintf("%s/%d %v", s.target, j.JobID, j.JobState))
			}
		}
	}
	if len(running) > 1 {
		return tj.Name + ": Slurm jobs " + strings.Join(running, ", ")
	}
	var list v1alpha1.DispatchList
	if err := env.fleet.Hub.Client.List(ctx, &list, client.InNamespace(tenant)); err != nil {
		return ""
	}
	var live []string
	for _, d := range list.Items {
		if d.Spec.TrainJob.Name == tj.Name && d.DeletionTimestamp.IsZero() && !d.Status.Phase.IsFinal() {
			live = append(live, d.Name)
		}
	}
	if len(live) > 1 {
		return tj.Name + ": live Dispatches " + strings.Join(live, ", ")
	}
	return ""
}

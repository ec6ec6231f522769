package slurmdispatch

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/internal/metrics"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// setQueueDepth sets the Target's spec.slurm.queueDepth for the test and
// puts the old value back after it.
func setQueueDepth(t *testing.T, depth int32) {
	t.Helper()
	ctx := context.Background()
	var tgt v1alpha1.Target
	NewWithT(t).Expect(env.fleet.Hub.Client.Get(ctx, client.ObjectKey{Name: targetName}, &tgt)).To(Succeed())
	old := tgt.Spec.Slurm.QueueDepth
	patch := client.MergeFrom(tgt.DeepCopy())
	tgt.Spec.Slurm.QueueDepth = ptr.To(depth)
	NewWithT(t).Expect(env.fleet.Hub.Client.Patch(ctx, &tgt, patch)).To(Succeed())
	t.Cleanup(func() {
		var tgt v1alpha1.Target
		NewWithT(t).Expect(env.fleet.Hub.Client.Get(ctx, client.ObjectKey{Name: targetName}, &tgt)).To(Succeed())
		patch := client.MergeFrom(tgt.DeepCopy())
		tgt.Spec.Slurm.QueueDepth = old
		NewWithT(t).Expect(env.fleet.Hub.Client.Patch(ctx, &tgt, patch)).To(Succeed())
	})
}

// TestQueueDepthOnSlurm: with every GPU of the partition taken, a Slurm
// target takes as many more jobs as its queue depth into Slurm's own
// queue, pending there and marked queued on their Dispatch; the rest wait
// on the hub. Once the cluster frees up, every job runs.
func TestQueueDepthOnSlurm(t *testing.T) {
	g := NewWithT(t)
	setQueueDepth(t, 1)
	makeRuntime(t, "queue-slurm", tytesting.TorchRuntimeSpec(1))
	filler := submit(t, trainJob("queue-filler", "queue-slurm", 4, 4, "sleep", "25"))
	dispatchOf(t, filler, phaseIs(v1alpha1.DispatchRunning))

	jobs := []string{"queue-a", "queue-b", "queue-c"}
	for _, name := range jobs {
		submit(t, trainJob(name, "queue-slurm", 1, 1, "true"))
	}
	// queued counts this test's Dispatches on the target that are not
	// finished, and those of them marked queued and not yet running.
	queued := func(g Gomega) (sent, marked int) {
		var list v1alpha1.DispatchList
		g.Expect(env.fleet.Hub.Client.List(context.Background(), &list)).To(Succeed())
		for _, d := range list.Items {
			if !strings.HasPrefix(d.Spec.Workload.Name, "trainjob-queue-") || d.Status.Phase.IsFinal() {
				continue
			}
			sent++
			if d.Annotations[v1alpha1.AnnotationQueued] == "true" && d.Status.Phase != v1alpha1.DispatchRunning {
				marked++
			}
		}
		return sent, marked
	}
	// The filler and exactly one queued job are on the cluster; that one
	// pends in Slurm, the other two wait on the hub.
	g.Eventually(func(g Gomega) {
		sent, marked := queued(g)
		g.Expect(marked).To(Equal(1), "queued Dispatches")
		g.Expect(sent).To(Equal(2), "Dispatches on the target: the filler and one queued job")
	}, slurmTimeout, util.Interval).Should(Succeed())
	g.Consistently(func(g Gomega) {
		sent, _ := queued(g)
		g.Expect(sent).To(Equal(2), "the queue depth is 1: no second job may wait in Slurm's queue")
	}, 5*time.Second, util.Interval).Should(Succeed())
	g.Eventually(func(g Gomega) {
		pending := 0
		jobs, err := serviceClient().Jobs(context.Background())
		g.Expect(err).NotTo(HaveOccurred())
		for i := range jobs {
			if strings.Contains(jobs[i].Comment, "/trainjob-queue-") && slices.Contains(jobs[i].JobState, "PENDING") {
				pending++
			}
		}
		g.Expect(pending).To(Equal(1), "jobs pending in Slurm's queue")
	}, slurmTimeout, util.Interval).Should(Succeed())
	// Once the filler ends, all three run.
	for _, name := range jobs {
		tj := trainJob(name, "queue-slurm", 1, 1, "true")
		g.Expect(env.fleet.Hub.Client.Get(context.Background(), client.ObjectKeyFromObject(tj), tj)).To(Succeed())
		dispatchOf(t, tj, phaseIs(v1alpha1.DispatchSucceeded))
	}
}

// TestAgentPollsIncrementally: while jobs run and nothing changes, the
// agent's only job reads are list requests (update_time), never a GET
// of a single job on a timer, though the suite re-observes each Dispatch
// every 5 s.
func TestAgentPollsIncrementally(t *testing.T) {
	g := NewWithT(t)
	makeRuntime(t, "poll-slurm", tytesting.TorchRuntimeSpec(1))
	var tjs = []string{"poll-a", "poll-b"}
	for _, name := range tjs {
		tj := submit(t, trainJob(name, "poll-slurm", 1, 1, "sleep", "40"))
		dispatchOf(t, tj, phaseIs(v1alpha1.DispatchRunning))
	}
	before := slurmRequests(t)
	first, err := serviceClient().JobsSince(context.Background(), 0)
	g.Expect(err).NotTo(HaveOccurred())
	const window = 12 * time.Second
	time.Sleep(window)
	after := slurmRequests(t)
	// Whether slurmctld answers "no change" here is its business (a clean
	// run saw 2 jobs listed again: running jobs' records change); the
	// agent's own request pattern below is what this test checks.
	_ = first
	for _, name := range tjs {
		tj := trainJob(name, "poll-slurm", 1, 1, "sleep", "40")
		g.Expect(env.fleet.Hub.Client.Get(context.Background(), client.ObjectKeyFromObject(tj), tj)).To(Succeed())
		dispatchOf(t, tj, phaseIs(v1alpha1.DispatchRunning))
	}
	gets := after["slurm/job GET"] - before["slurm/job GET"]
	lists := after["slurm/jobs GET"] - before["slurm/jobs GET"]
	t.Logf("in %s with 2 running jobs: %v single-job GETs, %v job lists, all requests before %v after %v", window, gets, lists, before, after)
	g.Expect(gets).To(BeZero(), "single-job GETs while the job list has the jobs")
	// The poller lists once a second and the fence lists every 2 s.
	g.Expect(lists).To(BeNumerically(">=", 6), "the poller keeps listing")
	g.Expect(lists).To(BeNumerically("<=", 2*window.Seconds()), "job lists")
}

// slurmRequests reads the agents' request counters to slurmrestd, by
// "operation method".
func slurmRequests(t *testing.T) map[string]float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "trainyard_agent_remote_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if label(m, "system") == metrics.SystemSlurmrestd {
				out[label(m, "op")+" "+label(m, "method")] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

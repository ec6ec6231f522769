package chaos

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/dispatch"
	"github.com/trainyard-dev/trainyard/test/util"
)

// TestJobEndingWhileItsAgentIsDownSucceedsOnce: every replica of the agent
// of a running job is killed with SIGKILL, and the job succeeds on its
// spoke while they are down. They stay down past the lease (the hub sees
// the target's lease lost and gives it no new work), not past the fence
// deadline. When they are back the success is reported: the job succeeded
// once, at attempt 1.
func TestJobEndingWhileItsAgentIsDownSucceedsOnce(t *testing.T) {
	g, rec := NewWithT(t), recording(t)
	tj := kubeJob(t, "ends-while-agent-down", "8s")
	first := runJobs(t, tj)[0]
	target := first.Spec.TargetName
	restart := killAgents(t, target)
	down := time.Now()

	g.Eventually(func(g Gomega) {
		copies, _, _ := rec.snapshot()
		g.Expect(copiesOf(copies, first.Labels[v1alpha1.LabelWorkloadUID])).To(ConsistOf(HaveField("Succeeded", true)))
		g.Expect(availableReason(g, target)).To(Equal(v1alpha1.ReasonLeaseNotRenewed))
	}, util.Timeout, util.Interval).Should(Succeed(), "the job succeeds on %s and the hub sees the lease lost", target)
	g.Expect(liveDispatch(g, tj).Status.Phase).To(Equal(v1alpha1.DispatchRunning), "what the hub knows of the job")
	g.Expect(time.Since(down)).To(BeNumerically("<", fenceAfter), "time the agent was down")

	restart()
	completes(g, tj)
	succeededOnce(g, rec, tj, target)
}

// TestCutOffAgentStopsOnlyUnfinishedWork: the agent of two running jobs is
// cut off from the hub past the fence deadline; both replicas live on and
// its leader stays elected on its spoke. One job succeeds during the cut:
// the agent keeps its finished work and reports the success once it
// reaches the hub again, so that job succeeded once, at attempt 1. The
// other still runs at the deadline: the agent stops it, says so
// (AgentFenced) once it can, and the hub runs it again, never beside its
// first copy. The agent is back before the hub's own requeue deadline.
func TestCutOffAgentStopsOnlyUnfinishedWork(t *testing.T) {
	g, rec := NewWithT(t), recording(t)
	target, other := env.fleet.Spokes[0].Name, env.fleet.Spokes[1].Name
	resume := pause(t, other) // both jobs go to target
	short, long := kubeJob(t, "succeeds-while-cut-off", "8s"), kubeJob(t, "stopped-while-cut-off", "90s")
	ds := runJobs(t, short, long)
	for _, d := range ds {
		g.Expect(d.Spec.TargetName).To(Equal(target))
	}
	resume()
	proxy := env.cut[target]
	proxy.Pause(true)
	cut := time.Now()
	t.Cleanup(proxy.Resume)

	shortUID, longUID := ds[0].Labels[v1alpha1.LabelWorkloadUID], ds[1].Labels[v1alpha1.LabelWorkloadUID]
	g.Eventually(func(g Gomega) {
		copies, _, _ := rec.snapshot()
		g.Expect(copiesOf(copies, shortUID)).To(ConsistOf(HaveField("Succeeded", true)))
	}, util.Timeout, util.Interval).Should(Succeed(), "the short job succeeds on the spoke during the cut")
	// At the fence deadline the agent stops the long job's copy.
	g.Eventually(func(g Gomega) {
		copies, _, _ := rec.snapshot()
		g.Expect(copiesOf(copies, longUID)).To(ConsistOf(HaveField("Ended", Not(BeZero()))))
	}, fenceAfter+util.Timeout, util.Interval).Should(Succeed(), "the agent stops the long job")
	// Not at the lease's end but at the fence deadline.
	g.Expect(time.Since(cut)).To(BeNumerically(">=", fenceAfter-evidenceLag), "time from the cut to the stop")
	g.Expect(liveDispatch(g, short).Status.Phase).To(Equal(v1alpha1.DispatchRunning), "what the hub knows of the short job")
	proxy.Resume()

	completes(g, short)
	succeededOnce(g, rec, short, target)
	g.Eventually(func(g Gomega) {
		d := liveDispatch(g, long)
		g.Expect(d.Spec.Attempt).To(BeEquivalentTo(2), "attempt %d: %s %s: %s", d.Spec.Attempt, d.Status.Phase, d.Status.Reason, d.Status.Message)
		g.Expect(d.Status.Remote).NotTo(BeNil())
	}, util.Timeout, util.Interval).Should(Succeed(), "the long job runs again")
	why := ""
	for _, e := range tenantEvents(g) {
		if e.Reason == dispatch.EventRequeued && string(e.InvolvedObject.UID) == longUID {
			why += e.Message + "\n"
		}
	}
	g.Expect(strings.Count(why, "\n")).To(Equal(1), "requeues of the long job:\n%s", why)
	g.Expect(why).To(ContainSubstring("lost its lease and stopped attempt 1"))
	copies, _, violations := rec.snapshot()
	g.Expect(violations).To(BeEmpty(), "samples with two live copies of one job")
	g.Expect(copiesOf(copies, longUID)).To(HaveLen(2))
}

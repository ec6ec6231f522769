package partition

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobset "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/hub/targets"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// TestCutOffAgentStopsItsWorkBeforeTheHubRequeues: the path between one
// agent and the hub is held past the fence deadline. The agent deletes its
// JobSet then; its pods stay Terminating for stopFor, as processes that
// checkpoint after SIGTERM (the kwok stop-for annotation, within the
// Target's default 30 s cap on termination grace). The hub requeues only
// after the fence deadline, the agent's stop bound (that cap + 15 s) and the
// grace, onto the other spoke. At every sample the pods on the spokes,
// Terminating ones included, belong to one attempt, at most one JobSet of
// the job exists and at most one of its Dispatches is live; when the path
// heals nothing is lost and the job completes exactly once.
func TestCutOffAgentStopsItsWorkBeforeTheHubRequeues(t *testing.T) {
	g := NewWithT(t)
	// stopFor outlasts what a hub that ignored the stop bound would wait
	// after the fence (the grace, and its requeue's own ~5 s), so such a hub
	// fails this test: measured, its second attempt's pods came ~9 s after
	// the first attempt's fence.
	const stopFor = 20 * time.Second
	makeRuntime(t, "torch-cut", "25s", stopFor.String())
	tj := submit(t, trainJob("cut", "torch-cut"))
	wl, first := waitRunning(t, tj)
	cut := first.Spec.TargetName
	watch := sampleOneAttempt(t, []*trainer.TrainJob{tj})

	cutAt := time.Now()
	env.proxies[cut].Pause(false)
	healed := false
	heal := func() {
		if !healed {
			env.proxies[cut].Resume()
			healed = true
		}
	}
	t.Cleanup(heal)

	var second v1alpha1.Dispatch
	g.Eventually(func(g Gomega) {
		live := liveDispatches(g, wl)
		g.Expect(live).To(HaveLen(1))
		second = live[0]
		g.Expect(second.Spec.Attempt).To(BeNumerically(">", first.Spec.Attempt))
		g.Expect(second.Spec.TargetName).NotTo(Equal(cut))
		g.Expect(second.Status.Phase).To(Equal(v1alpha1.DispatchRunning))
	}, util.Timeout, util.Interval).Should(Succeed())
	// The cut-off copy was stopped by its own agent, which still cannot
	// reach the hub.
	g.Expect(jobSetsOf(g, tj)).To(ConsistOf(HaveField("Spoke", second.Spec.TargetName)))
	heal()
	g.Eventually(func(g Gomega) {
		g.Expect(targetReason(g, cut)).To(Equal(v1alpha1.ReasonHeartbeatFresh))
	}, util.Timeout, util.Interval).Should(Succeed())
	completesOnce(t, tj)
	seen := watch()
	// The samples judged processes that outlived their JobSet's delete:
	// the first attempt's pods were seen Terminating for about stopFor.
	before, stopping, after := seen.podsOf(tj, first.Spec.Attempt), seen.terminatingOf(tj, first.Spec.Attempt), seen.podsOf(tj, second.Spec.Attempt)
	t.Logf("cut at %s; attempt %d's pods %v, Terminating %v; attempt %d's pods from %s, %v after the last of attempt %d's",
		cutAt.Format(time.StampMilli), first.Spec.Attempt, before, stopping, second.Spec.Attempt,
		after.first.Format(time.StampMilli), after.first.Sub(before.last), first.Spec.Attempt)
	g.Expect(stopping.last.Sub(stopping.first)).To(BeNumerically(">=", stopFor-2*time.Second), "attempt %d's pods Terminating", first.Spec.Attempt)
}

// TestHubCutOffFromEveryAgentRequeuesNothing: every agent's path is held
// past lease + grace. The hub sees every target silent, enters disruption
// mode (Event, metric) and requeues nothing; the agents stop their work;
// when the paths heal the agents report what they stopped, the jobs run
// again, one attempt at a time, and each completes exactly once.
func TestHubCutOffFromEveryAgentRequeuesNothing(t *testing.T) {
	g := NewWithT(t)
	makeRuntime(t, "torch-all", "20s", "")
	var jobs []*trainer.TrainJob
	var wls []*kueue.Workload
	for _, name := range []string{"all-a", "all-b"} {
		jobs = append(jobs, submit(t, trainJob(name, "torch-all")))
	}
	for _, tj := range jobs {
		wl, _ := waitRunning(t, tj)
		wls = append(wls, wl)
	}
	watch := sampleOneAttempt(t, jobs)
	for _, p := range env.proxies {
		p.Pause(false)
	}
	t.Cleanup(func() {
		for _, p := range env.proxies {
			p.Resume()
		}
	})
	g.Eventually(func(g Gomega) {
		for name := range env.proxies {
			g.Expect(targetReason(g, name)).To(Equal(v1alpha1.ReasonHubDisrupted))
		}
		g.Expect(metric(g, "trainyard_hub_disruption_mode")).To(ContainSubstring("trainyard_hub_disruption_mode 1"))
		g.Expect(disruptionEvents(g)).NotTo(BeEmpty())
	}, util.Timeout, util.Interval).Should(Succeed())
	// Nothing is requeued while the hub is cut off, however long it lasts.
	g.Consistently(func(g Gomega) {
		for _, wl := range wls {
			live := liveDispatches(g, wl)
			g.Expect(live).To(HaveLen(1))
			g.Expect(live[0].Spec.Attempt).To(Equal(int32(1)))
			var cur kueue.Workload
			g.Expect(env.fleet.Hub.Client.Get(context.Background(), client.ObjectKeyFromObject(wl), &cur)).To(Succeed())
			for _, c := range cur.Status.AdmissionChecks {
				g.Expect(c.State).NotTo(Equal(kueue.CheckStateRetry))
			}
		}
	}, leaseDuration+2*leaseGrace, util.Interval).Should(Succeed())
	for _, p := range env.proxies {
		p.Resume()
	}
	for _, tj := range jobs {
		completesOnce(t, tj)
	}
	watch()
}

// TestSkewedAgentClocksRequeueNothing: every agent's clock is minutes off
// the hub's (suite set-up). The hub judges leases by when it saw them
// renewed, so jobs keep running where they are, past several leases.
func TestSkewedAgentClocksRequeueNothing(t *testing.T) {
	g := NewWithT(t)
	makeRuntime(t, "torch-skew", "30s", "")
	var jobs []*trainer.TrainJob
	var wls []*kueue.Workload
	for _, name := range []string{"skew-a", "skew-b", "skew-c"} {
		jobs = append(jobs, submit(t, trainJob(name, "torch-skew")))
	}
	for _, tj := range jobs {
		wl, _ := waitRunning(t, tj)
		wls = append(wls, wl)
	}
	g.Consistently(func(g Gomega) {
		for name := range env.proxies {
			g.Expect(targetReason(g, name)).To(Equal(v1alpha1.ReasonHeartbeatFresh))
		}
		for _, wl := range wls {
			live := liveDispatches(g, wl)
			g.Expect(live).To(HaveLen(1))
			g.Expect(live[0].Spec.Attempt).To(Equal(int32(1)))
			g.Expect(live[0].Status.Phase).To(Equal(v1alpha1.DispatchRunning))
		}
	}, 2*(leaseDuration+leaseGrace), util.Interval).Should(Succeed())
}

// completesOnce waits for the TrainJob to complete and checks that exactly
// one attempt succeeded.
func completesOnce(t *testing.T, tj *trainer.TrainJob) {
	t.Helper()
	g := NewWithT(t)
	g.Eventually(func(g Gomega) {
		var cur trainer.TrainJob
		g.Expect(env.fleet.Hub.Client.Get(context.Background(), client.ObjectKeyFromObject(tj), &cur)).To(Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(cur.Status.Conditions, trainer.TrainJobComplete)).To(BeTrue(), "conditions %v", cur.Status.Conditions)
	}, 2*util.Timeout, util.Interval).Should(Succeed())
	wl := util.WorkloadOf(g, env.fleet.Hub.Client, tj)
	succeeded := 0
	for _, d := range dispatchesOf(g, wl) {
		if d.Status.Phase == v1alpha1.DispatchSucceeded {
			succeeded++
		}
	}
	g.Expect(succeeded).To(Equal(1), "attempts of %s that succeeded", tj.Name)
}

// makeRuntime creates a runtime whose pods run for runFor and, once
// deleted while running, stay Terminating for stopFor ("": go at once).
func makeRuntime(t *testing.T, name, runFor, stopFor string) {
	t.Helper()
	w := util.KwokRuntime(name, runFor)
	if stopFor != "" {
		w = w.PodAnnotation("kwok.trainyard.dev/stop-for", stopFor)
	}
	util.CreateForTest(t, env.fleet.Hub.Client, w.Obj())
}

func trainJob(name, runtime string) *trainer.TrainJob {
	return tytesting.MakeTrainJob(name, tenant).Queue(queue).
		RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).NumNodes(1).GPUsPerNode(2).Obj()
}

func submit(t *testing.T, tj *trainer.TrainJob) *trainer.TrainJob {
	t.Helper()
	return util.SubmitTrainJob(t, env.fleet.Hub.Client, tj, func(g Gomega) int { return len(jobSetsOf(g, tj)) })
}

func waitRunning(t *testing.T, tj *trainer.TrainJob) (*kueue.Workload, v1alpha1.Dispatch) {
	t.Helper()
	g := NewWithT(t)
	wl := util.WorkloadOf(g, env.fleet.Hub.Client, tj)
	var d v1alpha1.Dispatch
	g.Eventually(func(g Gomega) {
		live := liveDispatches(g, wl)
		g.Expect(live).To(HaveLen(1))
		d = live[0]
		g.Expect(d.Status.Phase).To(Equal(v1alpha1.DispatchRunning))
	}, util.Timeout, util.Interval).Should(Succeed())
	return wl, d
}

func dispatchesOf(g Gomega, wl *kueue.Workload) []v1alpha1.Dispatch {
	var list v1alpha1.DispatchList
	g.Expect(env.fleet.Hub.Client.List(context.Background(), &list,
		client.MatchingLabels{v1alpha1.LabelWorkloadUID: string(wl.UID)})).To(Succeed())
	return list.Items
}

func liveDispatches(g Gomega, wl *kueue.Workload) []v1alpha1.Dispatch {
	var out []v1alpha1.Dispatch
	for _, d := range dispatchesOf(g, wl) {
		if d.DeletionTimestamp.IsZero() {
			out = append(out, d)
		}
	}
	return out
}

type spokeJobSet struct {
	Spoke string
	Name  string
}

func jobSetsOf(g Gomega, tj *trainer.TrainJob) []spokeJobSet {
	var out []spokeJobSet
	for _, s := range env.fleet.Spokes {
		var list jobset.JobSetList
		g.Expect(s.Client.List(context.Background(), &list, client.MatchingLabels{v1alpha1.LabelTrainJobUID: string(tj.UID)})).To(Succeed())
		for _, js := range list.Items {
			out = append(out, spokeJobSet{Spoke: s.Name, Name: js.Name})
		}
	}
	return out
}

func targetReason(g Gomega, name string) string {
	return util.TargetReason(g, env.fleet.Hub.Client, name)
}

func disruptionEvents(g Gomega) []string {
	var events corev1.EventList
	g.Expect(env.fleet.Hub.Client.List(context.Background(), &events)).To(Succeed())
	var out []string
	for _, e := range events.Items {
		if e.Reason == targets.EventDisruptionStarted {
			out = append(out, e.Message)
		}
	}
	return out
}

func metric(g Gomega, name string) string {
	resp, err := http.Get(env.metricsURL)
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	return string(body)
}

func joinAll(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ", "
		}
		out += x
	}
	return out
}

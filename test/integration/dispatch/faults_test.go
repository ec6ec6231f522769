package dispatch

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobset "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/spoke"
	"github.com/trainyard-dev/trainyard/test/util"
)

// TestLostAgentIsRequeuedAndFencedOnReturn: a killed agent (not a cut-off
// one: test/integration/partition covers that) renews no lease, so after
// lease + grace on the hub's clock its job is requeued onto the other
// spoke, and not before; when it comes back, it deletes its now stale
// JobSet, and only one copy runs.
func TestLostAgentIsRequeuedAndFencedOnReturn(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	makeRuntime(t, "torch-lost", "10m")
	tj := submit(t, trainJob("lost", "torch-lost", 1, 4))
	wl, first := waitRunning(t, tj)
	lostSpoke := first.Spec.TargetName
	stale := remoteJobSetsOf(t, tj)
	g.Expect(stale).To(HaveLen(1))

	agent := env.agents[lostSpoke]
	agent.Stop()
	stopped := time.Now()
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = agent.Start()
		}
	})

	var second v1alpha1.Dispatch
	g.Eventually(func(g Gomega) {
		var live []v1alpha1.Dispatch
		for _, d := range dispatchesOf(g, wl) {
			if d.Spec.Attempt > first.Spec.Attempt {
				live = append(live, d)
			}
		}
		g.Expect(live).To(HaveLen(1))
		second = live[0]
		g.Expect(second.Spec.TargetName).NotTo(Equal(lostSpoke))
		g.Expect(second.Status.Phase).To(Equal(v1alpha1.DispatchRunning))
	}, 2*util.Timeout, util.Interval).Should(Succeed())
	// The hub waited out the lease (renewed every lostTimeout/4) and the
	// grace before requeueing.
	g.Expect(second.CreationTimestamp.Time).To(BeTemporally(">", stopped.Add(lostTimeout+leaseGrace-lostTimeout/4-time.Second)),
		"requeued before lease + grace (less one renewal) had passed")
	var events []string
	g.Eventually(func(g Gomega) {
		events = eventMessages(g, wl, "Requeued")
		g.Expect(events).To(ContainElement(ContainSubstring("target " + lostSpoke + " lost")))
	}, util.Timeout, util.Interval).Should(Succeed())

	// The killed agent's spoke still runs its copy: no agent is there to stop it.
	var js jobset.JobSet
	g.Expect(spokeNamed(lostSpoke).Client.Get(ctx, client.ObjectKeyFromObject(&stale[0].js), &js)).To(Succeed())

	g.Expect(agent.Start()).To(Succeed())
	restarted = true
	g.Eventually(func(g Gomega) {
		err := spokeNamed(lostSpoke).Client.Get(ctx, client.ObjectKeyFromObject(&stale[0].js), &js)
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "stale JobSet %s still on %s", stale[0].js.Name, lostSpoke)
		rs := remoteJobSetsOf(t, tj)
		g.Expect(rs).To(HaveLen(1))
		g.Expect(rs[0].spoke).To(Equal(second.Spec.TargetName))
	}, util.Timeout, util.Interval).Should(Succeed())
	g.Eventually(func(g Gomega) {
		var tg v1alpha1.Target
		g.Expect(env.fleet.Hub.Client.Get(ctx, client.ObjectKey{Name: lostSpoke}, &tg)).To(Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(tg.Status.Conditions, v1alpha1.TargetAvailable)).To(BeTrue())
	}, util.Timeout, util.Interval).Should(Succeed())
}

// TestHubCrashMidDispatchMakesNoDuplicates: the hub is killed while it is
// dispatching a batch and started again; every job ends with exactly one
// Dispatch and one remote JobSet. (Jobs are submitted while the hub runs:
// its runtime-pinning webhook fails closed, so no TrainJob is created
// unpinned while it is down.)
func TestHubCrashMidDispatchMakesNoDuplicates(t *testing.T) {
	g := NewWithT(t)
	makeRuntime(t, "torch-hubcrash", "10m")
	t.Cleanup(func() { _ = env.hub.Start() })
	var jobs []*trainer.TrainJob
	for i := 0; i < 6; i++ {
		jobs = append(jobs, submit(t, trainJob(fmt.Sprintf("hubcrash-%d", i), "torch-hubcrash", 1, 2)))
	}
	// Kill it as soon as it has written its first Dispatch, mid-batch.
	g.Eventually(func(g Gomega) {
		n := 0
		for _, tj := range jobs {
			n += len(dispatchesOf(g, util.WorkloadOf(g, env.fleet.Hub.Client, tj)))
		}
		g.Expect(n).To(BeNumerically(">", 0))
	}, util.Timeout, 20*time.Millisecond).Should(Succeed())
	env.hub.Stop()
	g.Expect(env.hub.Start()).To(Succeed())
	expectOneCopyEach(t, jobs)
}

// TestAgentCrashMidSubmitMakesNoDuplicates: agents are killed right after
// they take up their Dispatches and started again; create-or-adopt keeps one
// remote JobSet per job.
func TestAgentCrashMidSubmitMakesNoDuplicates(t *testing.T) {
	g := NewWithT(t)
	makeRuntime(t, "torch-agentcrash", "10m")
	var jobs []*trainer.TrainJob
	for i := 0; i < 3; i++ {
		jobs = append(jobs, submit(t, trainJob(fmt.Sprintf("agentcrash-%d", i), "torch-agentcrash", 1, 2)))
	}
	g.Eventually(func(g Gomega) {
		taken := 0
		for _, tj := range jobs {
			for _, d := range dispatchesOf(g, util.WorkloadOf(g, env.fleet.Hub.Client, tj)) {
				if len(d.Finalizers) > 0 {
					taken++
				}
			}
		}
		g.Expect(taken).To(BeNumerically(">", 0))
	}, util.Timeout, 20*time.Millisecond).Should(Succeed())
	for _, a := range env.agents {
		a.Stop()
	}
	t.Cleanup(func() {
		for _, a := range env.agents {
			_ = a.Start()
		}
	})
	for _, a := range env.agents {
		g.Expect(a.Start()).To(Succeed())
	}
	expectOneCopyEach(t, jobs)
}

func expectOneCopyEach(t *testing.T, jobs []*trainer.TrainJob) {
	t.Helper()
	g := NewWithT(t)
	check := func(g Gomega) {
		for _, tj := range jobs {
			wl := util.WorkloadOf(g, env.fleet.Hub.Client, tj)
			g.Expect(dispatchesOf(g, wl)).To(HaveLen(1), "dispatches of %s", tj.Name)
			g.Expect(remoteJobSetsOf(t, tj)).To(HaveLen(1), "remote JobSets of %s", tj.Name)
		}
	}
	g.Eventually(check, util.Timeout, util.Interval).Should(Succeed())
	for _, tj := range jobs {
		waitRunning(t, tj)
	}
	g.Consistently(check, 3*time.Second, 500*time.Millisecond).Should(Succeed())
}

// TestBurstDoesNotOverbook: jobs admitted at once are placed by concurrent
// workers reading a cache; together they must not book more GPUs than a
// target has. 8 jobs of 4 GPUs fill two 16-GPU spokes exactly, 4 each; an
// over-booked spoke would leave a job's pod Pending and never Running.
func TestBurstDoesNotOverbook(t *testing.T) {
	g := NewWithT(t)
	makeRuntime(t, "torch-burst", "10m")
	jobs := fillSpokes(t, "burst", "torch-burst")
	perTarget := map[string]int{}
	for _, tj := range jobs {
		for _, d := range dispatchesOf(g, util.WorkloadOf(g, env.fleet.Hub.Client, tj)) {
			perTarget[d.Spec.TargetName]++
		}
	}
	g.Expect(perTarget).To(Equal(map[string]int{"spoke1": nodesPerSpoke, "spoke2": nodesPerSpoke}))
}

// TestAgentCredentialsAreNamespaceScoped: an agent's hub credentials reach
// its own Dispatches and Target and nothing else.
func TestAgentCredentialsAreNamespaceScoped(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c, err := client.New(env.agentCfg["spoke1"], client.Options{Scheme: spoke.HubScheme()})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.List(ctx, &v1alpha1.DispatchList{}, client.InNamespace("trainyard-spoke1"))).To(Succeed())
	g.Expect(c.Get(ctx, client.ObjectKey{Name: "spoke1"}, &v1alpha1.Target{})).To(Succeed())

	forbidden := func(err error) {
		g.ExpectWithOffset(1, apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden, got %v", err)
	}
	forbidden(c.List(ctx, &v1alpha1.DispatchList{}, client.InNamespace("trainyard-spoke2")))
	forbidden(c.List(ctx, &v1alpha1.DispatchList{}))
	forbidden(c.Get(ctx, client.ObjectKey{Name: "spoke2"}, &v1alpha1.Target{}))
	forbidden(c.List(ctx, &v1alpha1.TargetList{}))
	forbidden(c.Create(ctx, &v1alpha1.Dispatch{ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: "trainyard-spoke1"}}))

	hubScheme := env.fleet.Hub.Client.Scheme()
	wc, err := client.New(env.agentCfg["spoke1"], client.Options{Scheme: hubScheme})
	g.Expect(err).NotTo(HaveOccurred())
	forbidden(wc.List(ctx, &kueue.WorkloadList{}, client.InNamespace(tenant)))
	forbidden(wc.List(ctx, &trainer.TrainJobList{}, client.InNamespace(tenant)))
}

// TestHubServesMetrics: the hub's /metrics carries trainyard's series.
func TestHubServesMetrics(t *testing.T) {
	g := NewWithT(t)
	makeRuntime(t, "torch-metrics", "1s")
	tj := submit(t, trainJob("metrics", "torch-metrics", 1, 1))
	waitRunning(t, tj)
	g.Eventually(func(g Gomega) {
		resp, err := http.Get(env.metricsURL)
		g.Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		g.Expect(err).NotTo(HaveOccurred())
		text := string(body)
		g.Expect(text).To(MatchRegexp(`trainyard_dispatches_total\{result="dispatched",target="spoke[12]"\} [1-9]`))
		g.Expect(text).To(MatchRegexp(`trainyard_admission_to_running_seconds_count\{target="spoke[12]"\} [1-9]`))
		g.Expect(text).To(MatchRegexp(`trainyard_target_heartbeat_age_seconds\{target="spoke1"\} `))
		// Declared at 0 when the controller starts, failure or not.
		g.Expect(text).To(MatchRegexp(`trainyard_sync_errors_total\{component="hub-dispatch"\} \d`))
	}, util.Timeout, util.Interval).Should(Succeed())
}

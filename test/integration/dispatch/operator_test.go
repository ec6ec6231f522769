package dispatch

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/hub"
	"github.com/trainyard-dev/trainyard/hub/targets"
	"github.com/trainyard-dev/trainyard/spoke"
	"github.com/trainyard-dev/trainyard/test/util"
)

// replica is one hub or agent manager of a leader-elected pair, as a pod.
type replica struct {
	mgr     ctrl.Manager
	cancel  context.CancelFunc
	done    chan error
	probe   string // http://host:port of /healthz and /readyz
	metrics string // http://host:port/metrics, or ""
}

// localAddr is a free loopback address.
func localAddr(g Gomega) string {
	port, err := kube.FreePort()
	g.Expect(err).NotTo(HaveOccurred())
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// startReplica builds a manager with build and runs it until the test ends
// or stop is called.
func startReplica(t *testing.T, probe, metrics string, build func(ctx context.Context) (ctrl.Manager, error)) *replica {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	mgr, err := build(ctx)
	if err != nil {
		cancel()
		t.Fatalf("build replica: %v", err)
	}
	r := &replica{mgr: mgr, cancel: cancel, done: make(chan error, 1), probe: "http://" + probe}
	if metrics != "" {
		r.metrics = "http://" + metrics + "/metrics"
	}
	go func() { r.done <- mgr.Start(ctx) }()
	t.Cleanup(func() { r.stop() })
	return r
}

// stop stops the replica gracefully, as a pod's SIGTERM does, and returns
// when its manager has returned.
func (r *replica) stop() time.Time {
	r.cancel()
	<-r.done
	r.done <- nil // a second stop returns at once
	return time.Now()
}

func (r *replica) elected() bool {
	select {
	case <-r.mgr.Elected():
		return true
	default:
		return false
	}
}

// get returns the status and body of a GET.
func get(g Gomega, url string) (int, string) {
	resp, err := http.Get(url)
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	return resp.StatusCode, string(body)
}

// expectReady waits until the replica's /readyz passes with every named
// check, and checks /healthz answers too.
func expectReady(t *testing.T, r *replica, checks ...string) {
	t.Helper()
	g := NewWithT(t)
	g.Eventually(func(g Gomega) {
		code, body := get(g, r.probe+"/readyz?verbose")
		g.Expect(code).To(Equal(http.StatusOK), body)
		for _, c := range checks {
			g.Expect(body).To(ContainSubstring("[+]"+c+" ok"), body)
		}
	}, util.Timeout, util.Interval).Should(Succeed())
	code, body := get(g, r.probe+"/healthz")
	g.Expect(code).To(Equal(http.StatusOK), body)
}

// expectHandover stops the leader a and checks that b, a standby so far,
// leads well before leaseDuration: a has released its lease.
func expectHandover(t *testing.T, a, b *replica, leaseDuration time.Duration) {
	t.Helper()
	g := NewWithT(t)
	g.Eventually(a.elected, util.Timeout, util.Interval).Should(BeTrue(), "the first replica never led")
	g.Consistently(b.elected, 2*time.Second, util.Interval).Should(BeFalse(), "the standby leads beside the leader")
	stopped := a.stop()
	g.Eventually(b.elected, leaseDuration, 50*time.Millisecond).Should(BeTrue(), "the standby did not take over within the lease")
	took := time.Since(stopped)
	t.Logf("the standby led %s after the leader stopped (leader lease %s)", took.Round(10*time.Millisecond), leaseDuration)
	g.Expect(took).To(BeNumerically("<", leaseDuration/2), "the stopped leader did not release its lease")
}

// TestHubReadyzAndLeaderHandover: two hub replicas with leader election.
// Each is ready once its caches synced and its webhook serves, the standby
// too (it serves the webhook); when the leader stops gracefully the standby
// leads long before the lease would have run out.
func TestHubReadyzAndLeaderHandover(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env.hub.Stop()
	t.Cleanup(func() { g.Expect(env.hub.Start()).To(Succeed()) })
	const ns = "trainyard-system"
	g.Expect(env.fleet.Hub.EnsureNamespace(ctx, ns)).To(Succeed())
	certDir := t.TempDir()
	_, err := kube.ServingCert(certDir)
	g.Expect(err).NotTo(HaveOccurred())

	build := func(probe string) func(context.Context) (ctrl.Manager, error) {
		port, err := kube.FreePort()
		g.Expect(err).NotTo(HaveOccurred())
		return func(context.Context) (ctrl.Manager, error) {
			return hub.NewManager(env.fleet.Hub.Config, hub.ManagerOptions{
				ProbeAddr: probe, LeaderElect: true, LeaderElectionNamespace: ns, SkipNameValidation: true,
				WebhookHost: "127.0.0.1", WebhookPort: port, WebhookCertDir: certDir,
				Options: hub.Options{Lease: targets.LeaseSettings{Duration: lostTimeout, Grace: leaseGrace}},
			})
		}
	}
	probeA, probeB := localAddr(g), localAddr(g)
	a := startReplica(t, probeA, "", build(probeA))
	expectReady(t, a, "caches", "webhook")
	b := startReplica(t, probeB, "", build(probeB))
	expectReady(t, b, "caches", "webhook")
	// controller-runtime's default leader lease.
	expectHandover(t, a, b, 15*time.Second)
	expectReady(t, b, "caches", "webhook")
}

// TestAgentReadyzAndLeaderHandover: two replicas of spoke2's agent. Each is
// ready once its caches synced and it renewed (leader) or read (standby)
// its lease on the hub, the leader once its backend answered; the leader's
// metrics endpoint serves the agent's series; when the leader stops
// gracefully the standby leads long before the lease would have run out.
func TestAgentReadyzAndLeaderHandover(t *testing.T) {
	g := NewWithT(t)
	agent := env.agents["spoke2"]
	agent.Stop()
	t.Cleanup(func() { g.Expect(agent.Start()).To(Succeed()) })

	build := func(probe, metrics string) func(context.Context) (ctrl.Manager, error) {
		return func(ctx context.Context) (ctrl.Manager, error) {
			return spoke.NewKubernetesAgent(ctx, env.agentCfg["spoke2"], spoke.KubernetesOptions{
				Target: "spoke2", Spoke: spokeNamed("spoke2").Config, ProbeAddr: probe, MetricsAddr: metrics,
				LeaderElect: true, SkipNameValidation: true,
				Agent: spoke.Options{HeartbeatInterval: heartbeatEvery, FenceInterval: 2 * time.Second, Resync: 5 * time.Second,
					LeaseDuration: lostTimeout},
			})
		}
	}
	probeA, metricsA, probeB := localAddr(g), localAddr(g), localAddr(g)
	a := startReplica(t, probeA, metricsA, build(probeA, metricsA))
	expectReady(t, a, "caches", "lease", "backend")
	b := startReplica(t, probeB, "", build(probeB, ""))
	expectReady(t, b, "caches", "lease", "backend")

	g.Eventually(func(g Gomega) {
		code, text := get(g, a.metrics)
		g.Expect(code).To(Equal(http.StatusOK))
		series := trainyardSeries(text)
		g.Expect(series).To(MatchRegexp(`(?m)^trainyard_backend_call_duration_seconds_count\{backend="jobset",op="capacity"\} [1-9]`))
		g.Expect(series).To(MatchRegexp(`(?m)^trainyard_agent_dispatches\{phase="Running",target="spoke2"\} \d`))
		g.Expect(series).To(MatchRegexp(`(?m)^trainyard_fence_deletions_total \d`))
	}, util.Timeout, util.Interval).Should(Succeed())

	// The agents' leader lease: their hub lease plus twice a 10 s slack.
	expectHandover(t, a, b, lostTimeout+20*time.Second)
	expectReady(t, b, "caches", "lease", "backend")
}

// TestAgentEventsOnDispatch: the agent records on the hub Dispatch that it
// created the remote work and, once the job is deleted, that it deleted it.
func TestAgentEventsOnDispatch(t *testing.T) {
	g := NewWithT(t)
	ctx, c := context.Background(), env.fleet.Hub.Client
	makeRuntime(t, "torch-events", "10m")
	tj := submit(t, trainJob("events", "torch-events", 1, 1))
	_, d := waitRunning(t, tj)
	g.Expect(d.Status.Remote).NotTo(BeNil())
	remote := fmt.Sprintf("%s %s/%s", d.Status.Remote.Kind, d.Status.Remote.Namespace, d.Status.Remote.Name)

	g.Eventually(func(g Gomega) {
		g.Expect(agentEvents(g, &d, spoke.EventRemoteCreated)).To(ConsistOf("created " + remote))
	}, util.Timeout, util.Interval).Should(Succeed())

	g.Expect(c.Delete(ctx, tj, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(agentEvents(g, &d, spoke.EventRemoteCancelled)).To(ConsistOf("deleted " + remote))
	}, util.Timeout, util.Interval).Should(Succeed())
}

// trainyardSeries keeps the trainyard_ samples of a scrape, so a failed
// match prints only those.
func trainyardSeries(text string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "trainyard_") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// agentEvents lists the messages of the agent's events with reason on d
// (matched by UID: a later Dispatch of the same name is another object).
func agentEvents(g Gomega, d *v1alpha1.Dispatch, reason string) []string {
	var events corev1.EventList
	g.Expect(env.fleet.Hub.Client.List(context.Background(), &events, client.InNamespace(d.Namespace))).To(Succeed())
	var msgs []string
	for _, e := range events.Items {
		if e.InvolvedObject.UID == d.UID && e.InvolvedObject.Kind == "Dispatch" && e.Reason == reason &&
			e.Source.Component == "trainyard-agent" {
			msgs = append(msgs, e.Message)
		}
	}
	return msgs
}

package chaos

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainyard "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/controllers"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/test/harness/netproxy"
	"github.com/trainyard-dev/trainyard/test/harness/procs"
)

const (
	// replicas of the hub and of each agent, as the charts run them.
	replicas = 2
	// hubElectionNamespace holds the hub replicas' leader-election lock on
	// the hub (the chart's release namespace); hubUser is the identity the
	// harness gives the hub (config/rbac/hub bound to it).
	hubElectionNamespace = "trainyard-system"
	hubUser              = "trainyard-hub"
	// agentElectionNamespace holds a kube agent's lock on its own spoke, so
	// its election never depends on the hub.
	agentElectionNamespace = "trainyard-agents"
)

// makeProcesses writes each identity's kubeconfig and builds the command
// lines of two hub replicas and two replicas of each agent, all with
// leader election on, as the charts run them. The hub replicas serve the
// pinning webhook on ports of their own behind one front door at the
// registered address, as a Service fronts the chart's pods. Every agent
// reaches the hub through a proxy of its target (env.cut) a test can cut.
func makeProcesses(ctx context.Context, dir string, bins map[string]string, reg *trainyard.Registration, o trainyard.Options) error {
	if err := electionRBAC(ctx); err != nil {
		return err
	}
	kc := func(name string) string { return filepath.Join(dir, name+".kubeconfig") }
	if err := procs.WriteKubeconfig(kc("hub"), reg.HubConfig); err != nil {
		return err
	}
	add := func(name, bin string, args ...string) {
		env.procs[name] = procs.New(name, bin, filepath.Join(dir, name+".log"), args...)
		env.names = append(env.names, name)
	}
	h := reg.HubOptions
	var webhookPorts []int
	for i := range replicas {
		port, err := kube.FreePort()
		if err != nil {
			return err
		}
		webhookPorts = append(webhookPorts, port)
		metrics := "0"
		if i == 0 {
			metrics = h.MetricsAddr // reg.MetricsURL: the first replica's
		}
		add(replicaName("hub", i), bins["trainyard-hub"], "--kubeconfig="+kc("hub"),
			"--leader-elect=true", "--leader-election-namespace="+hubElectionNamespace,
			"--metrics-bind-address="+metrics, "--health-probe-bind-address=0",
			"--webhook-host="+h.WebhookHost, "--webhook-port="+strconv.Itoa(port), "--webhook-cert-dir="+h.WebhookCertDir,
			"--agent-lease-duration="+leaseDuration.String(), "--agent-fence-after="+fenceAfter.String(),
			"--lost-target-grace="+leaseGrace.String())
	}
	if err := startFrontDoor(ctx, h.WebhookHost, h.WebhookPort, webhookPorts); err != nil {
		return err
	}
	common := []string{"--leader-elect=true", "--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--heartbeat-interval=" + o.HeartbeatInterval.String(), "--fence-interval=" + o.FenceInterval.String(),
		"--resync-period=" + o.Resync.String(), "--lease-duration=" + leaseDuration.String(),
		"--lease-renew-interval=" + renewEvery.String(), "--fence-after=" + fenceAfter.String()}
	hubFor := func(target string) (string, error) {
		path := kc("agent-" + target)
		cfg, err := cuttable(target, reg.AgentConfigs[target])
		if err != nil {
			return "", err
		}
		return path, procs.WriteKubeconfig(path, cfg)
	}
	for _, s := range env.fleet.Spokes {
		path, err := hubFor(s.Name)
		if err != nil {
			return err
		}
		if err := s.EnsureNamespace(ctx, agentElectionNamespace); err != nil {
			return err
		}
		for i := range replicas {
			add(replicaName("agent-"+s.Name, i), bins["trainyard-agent"], append([]string{"--target=" + s.Name,
				"--backend=kubernetes", "--hub-kubeconfig=" + path, "--spoke-kubeconfig=" + s.Kubeconfig,
				"--leader-election-kubeconfig=" + s.Kubeconfig, "--leader-election-namespace=" + agentElectionNamespace}, common...)...)
		}
	}
	for _, st := range o.Slurm {
		path, err := hubFor(st.Name)
		if err != nil {
			return err
		}
		// No cluster of its own: the replicas elect on the hub, in the agent
		// namespace, as a Slurm agent on a login node does.
		for i := range replicas {
			add(replicaName("agent-"+st.Name, i), bins["trainyard-agent"], append([]string{"--target=" + st.Name,
				"--backend=slurm", "--hub-kubeconfig=" + path, "--slurm-poll-interval=" + st.PollInterval.String(),
				"--slurm-output-root=" + st.Cluster.Root}, common...)...)
		}
	}
	return nil
}

func replicaName(base string, i int) string { return fmt.Sprintf("%s-%d", base, i+1) }

// agentsOf are the replicas of target's agent.
func agentsOf(target string) []*procs.Process {
	var out []*procs.Process
	for _, name := range env.names {
		if strings.HasPrefix(name, "agent-"+target+"-") {
			out = append(out, env.procs[name])
		}
	}
	return out
}

// targetOf is the Target a process serves ("" for a hub replica).
func targetOf(name string) string {
	if !strings.HasPrefix(name, "agent-") {
		return ""
	}
	name = strings.TrimPrefix(name, "agent-")
	return name[:strings.LastIndex(name, "-")]
}

// electionRBAC grants the hub identity its leader-election lock and events
// in hubElectionNamespace, as the hub chart's leader-election Role does.
func electionRBAC(ctx context.Context) error {
	h := env.fleet.Hub
	if err := h.EnsureNamespace(ctx, hubElectionNamespace); err != nil {
		return err
	}
	meta := metav1.ObjectMeta{Name: "trainyard-hub-leader-election", Namespace: hubElectionNamespace}
	role := &rbacv1.Role{ObjectMeta: meta, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}}
	binding := &rbacv1.RoleBinding{ObjectMeta: meta,
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: meta.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: hubUser}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := h.Client.Create(ctx, obj); client.IgnoreAlreadyExists(err) != nil {
			return err
		}
	}
	return nil
}

// cuttable starts target's proxy to the hub API server (env.cut) and
// returns cfg pointed at it.
func cuttable(target string, cfg *rest.Config) (*rest.Config, error) {
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, err
	}
	p, err := netproxy.Start(u.Host)
	if err != nil {
		return nil, err
	}
	env.cut[target] = p
	cfg = rest.CopyConfig(cfg)
	u.Host = p.Addr()
	cfg.Host = u.String()
	return cfg, nil
}

// startFrontDoor listens at host:port and hands each connection to the
// first of ports that accepts it, starting from the next one each time, as
// a Service spreads connections over the ready pods. TLS passes through:
// both replicas serve the same certificate.
func startFrontDoor(ctx context.Context, host string, port int, ports []int) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("webhook front door: %w", err)
	}
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	var next atomic.Uint32
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			go frontConn(in, host, ports, int(next.Add(1)))
		}
	}()
	return nil
}

func frontConn(in net.Conn, host string, ports []int, first int) {
	defer in.Close()
	for i := range ports {
		port := ports[(first+i)%len(ports)]
		out, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(port)), time.Second)
		if err != nil {
			continue
		}
		defer out.Close()
		done := make(chan struct{}, 2)
		go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
		go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
		<-done
		return
	}
}

package statusapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/kubeflow/trainer/v2/pkg/statusserver"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestEndpointServesJobsOverTLS: the endpoint made from a state directory
// gives a job the URL, credential and CA that reach it over TLS and are
// accepted for that job; a second endpoint from the same directory (the
// agent restarted) accepts the same credential under the same CA.
func TestEndpointServesJobsOverTLS(t *testing.T) {
	s := runtime.NewScheme()
	utilruntime.Must(v1alpha1.AddToScheme(s))
	d := running("train")
	reader := fake.NewClientBuilder().WithScheme(s).WithObjects(d).
		WithIndex(&v1alpha1.Dispatch{}, IndexDispatchUID, func(o client.Object) []string { return []string{string(o.GetUID())} }).Build()
	dir := t.TempDir()
	env := map[string]string{}
	var caPEM []byte
	addr := freeAddr(t)
	for restart := 0; restart < 2; restart++ {
		reports := NewReports(0)
		ep, err := NewEndpoint(EndpointOptions{Listen: addr, URL: "https://" + addr, StateDir: dir, Clock: clocktesting.NewFakePassiveClock(now)},
			"slurm-1", reader, reports, logr.Discard())
		if err != nil {
			t.Fatal(err)
		}
		if restart == 0 {
			for _, kv := range ep.JobEnv(d) {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
			caPEM = ep.CAPEM()
		} else if string(ep.CAPEM()) != string(caPEM) {
			t.Fatal("the CA changed across a restart")
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- ep.Start(ctx) }()

		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM([]byte(env[EnvCA]))
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		url := env[EnvURL]
		if want := "https://" + addr + statusserver.StatusUrl("team-a", "train"); url != want {
			t.Fatalf("URL %q, want %q", url, want)
		}
		var resp *http.Response
		for i := 0; i < 50; i++ {
			req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(validBody))
			req.Header.Set("Authorization", "Bearer "+env[EnvToken])
			if resp, err = c.Do(req); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("restart %d: %v", restart, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || reports.Due(d.UID, now, true) == nil {
			t.Errorf("restart %d: code %d, stored %v; want 200 and stored", restart, resp.StatusCode, reports.Len())
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(fmt.Errorf("restart %d: %w", restart, err))
		}
	}
}

// TestEndpointOnlyOnTheElectedReplica: the endpoint is a leader-elected
// runnable, so a standby replica does not listen (a report is refused at
// connect: the reports live in the elected replica's memory, which alone
// writes them to the hub); the agent's status Service selects the elected
// replica's pod (spoke's status-leader label, TestStatusLeaderLabel).
func TestEndpointOnlyOnTheElectedReplica(t *testing.T) {
	ep, err := NewEndpoint(EndpointOptions{Listen: freeAddr(t), URL: "https://agent.example:9443", StateDir: t.TempDir()}, "slurm-1",
		fake.NewClientBuilder().Build(), NewReports(0), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if !ep.NeedLeaderElection() {
		t.Error("the status endpoint runs on standby replicas too")
	}
	if conn, err := net.DialTimeout("tcp", ep.opts.Listen, time.Second); err == nil {
		conn.Close()
		t.Error("an endpoint not started (a standby's) accepts connections")
	}
}

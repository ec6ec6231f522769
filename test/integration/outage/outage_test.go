package outage

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/trainyard-dev/trainyard/test/util"
)

const (
	// defaultFreeze is how long the hub's kube-apiserver stays frozen:
	// the lease (40 s) seven times over, and an upgrade's worth, well
	// inside the agents' fence-after (15 min).
	defaultFreeze = 5 * time.Minute
	// freezeEnv overrides defaultFreeze (a Go duration) for quick local runs.
	freezeEnv = "TRAINYARD_OUTAGE_FREEZE"
	// etcdDown is how long the hub's etcd is stopped: longer than the lease.
	etcdDown = 45 * time.Second
	// sampleEvery paces the checks of the recorder during an outage.
	sampleEvery = 2 * time.Second
	// afterFirstSign is how much longer an outage lasts once the recorder
	// has seen work stopped or started again.
	afterFirstSign = 15 * time.Second
)

// TestFrozenHubAPIServerStopsNothing freezes the hub's kube-apiserver
// (SIGSTOP) for five minutes while a JobSet and a Slurm job run. The
// agents cannot renew their leases for seven lease durations; they stop
// nothing, so the same JobSet and the same Slurm job run on, never
// restarted, at the same attempt, and the job's own process never sees a
// SIGTERM. Once the API server is back the Targets are Available again,
// the TrainJobs say Running, and deleting them releases their quota.
func TestFrozenHubAPIServerStopsNothing(t *testing.T) {
	freeze := freezeFor(t)
	jobs := startJobs(t, "frozen")
	rec := startRecorder(t, jobs)
	pid, err := util.APIServerPID(env.fleet.Hub)
	if err != nil {
		t.Fatal(err)
	}
	ended := outage(t, rec, "hub kube-apiserver frozen", freeze, func() func() {
		signal(t, pid, syscall.SIGSTOP)
		return func() { signal(t, pid, syscall.SIGCONT) }
	})
	jobs.survived(t, rec, ended)
	jobs.finish(t)
}

// TestRestartedHubEtcdStopsNothing stops the hub's etcd (SIGTERM, as an
// upgrade would) for longer than the lease and starts it again on its
// data, while a JobSet and a Slurm job run: nothing is stopped or
// restarted, as with a frozen API server.
func TestRestartedHubEtcdStopsNothing(t *testing.T) {
	jobs := startJobs(t, "etcd")
	rec := startRecorder(t, jobs)
	pid, err := util.EtcdPID(env.fleet.Hub)
	if err != nil {
		t.Fatal(err)
	}
	argv := util.Cmdline(pid)
	ended := outage(t, rec, "hub etcd stopped", etcdDown, func() func() {
		signal(t, pid, syscall.SIGTERM)
		NewWithT(t).Eventually(func() []string { return util.Cmdline(pid) }, time.Minute, util.Interval).
			Should(BeEmpty(), "etcd %d still runs", pid)
		return func() { startEtcd(t, argv) }
	})
	jobs.survived(t, rec, ended)
	jobs.finish(t)
}

// freezeFor is defaultFreeze, or $TRAINYARD_OUTAGE_FREEZE.
func freezeFor(t *testing.T) time.Duration {
	v := os.Getenv(freezeEnv)
	if v == "" {
		return defaultFreeze
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration", freezeEnv, v)
	}
	t.Logf("%s=%s: the outage lasts %v instead of %v", freezeEnv, v, d, defaultFreeze)
	return d
}

// outage starts a fault with begin, holds it for d and ends it with the
// function begin returned (also at cleanup, should the test stop early).
// Every sampleEvery meanwhile it checks the recorder, and fails the test
// soon after the first sign of work stopped or started again, ending the
// outage early. It returns when the outage ended.
func outage(t *testing.T, rec *recorder, what string, d time.Duration, begin func() (end func())) time.Time {
	t.Helper()
	ended := false
	var endFault func()
	finish := func() {
		if !ended && endFault != nil {
			ended = true
			endFault()
		}
	}
	t.Cleanup(finish)
	t0 := time.Now()
	endFault = begin()
	t.Logf("%s at %s for %v", what, t0.Format(time.RFC3339), d)
	for time.Since(t0) < d {
		time.Sleep(min(sampleEvery, d-time.Since(t0)))
		if len(rec.violations()) > 0 {
			// A while longer, so the failure shows all that was stopped.
			time.Sleep(afterFirstSign)
			finish()
			t.Fatalf("%s for %v: work was stopped or started again:\n%s", what, time.Since(t0).Round(time.Second), strings.Join(rec.violations(), "\n"))
		}
	}
	finish()
	t.Logf("%s: ended after %v; Slurm polls failed %d times meanwhile", what, time.Since(t0).Round(time.Second), rec.slurmErrorCount())
	return time.Now()
}

// signal sends sig to pid, failing the test if it cannot.
func signal(t *testing.T, pid int, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(pid, sig); err != nil {
		t.Errorf("signal %v to %d: %v", sig, pid, err)
	}
}

// startEtcd starts etcd with argv, the command line envtest gave the one
// the test stopped (same data folder and ports), and waits until it is
// healthy. It runs until the suite ends (stopEtcds), after the hub.
func startEtcd(t *testing.T, argv []string) {
	t.Helper()
	logFile, err := os.Create(filepath.Join(env.fleet.Hub.Dir, "etcd-restarted-"+strconv.Itoa(len(env.etcds))+".log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start etcd again: %v", err)
	}
	env.etcds = append(env.etcds, cmd)
	var url string
	for _, a := range argv {
		if v, ok := strings.CutPrefix(a, "--listen-client-urls="); ok {
			url = strings.Split(v, ",")[0]
		}
	}
	NewWithT(t).Eventually(func() error {
		resp, err := http.Get(url + "/health")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}, time.Minute, util.Interval).Should(Succeed(), "etcd at %s", url)
}

// stopEtcds stops the etcd processes the tests started.
func stopEtcds() {
	for _, cmd := range env.etcds {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
}

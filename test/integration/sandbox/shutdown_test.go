// Package sandbox runs the built trainyard CLI's `dev up` (one spoke, no
// Slurm, one sample) and stops it every way a user does: Ctrl-C, SIGTERM,
// closing the pipe its output goes to, and `dev up --detach` followed by
// `dev down`. Each time every process the sandbox started (kube-apiserver,
// etcd, kwok, Kueue, JobSet, the controllers, the process guard) must be
// gone afterwards. It also submits to the sandbox's queue jobs that request
// CPU and memory, which must be admitted and complete (queues_test.go).
package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
)

var (
	cliPath string
	repo    string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if repo, err = kube.RepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "trainyard-sandbox-cli-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	cliPath = filepath.Join(dir, "trainyard")
	build := exec.Command("go", "build", "-o", cliPath, "./cmd/trainyard")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build the CLI: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// upArgs is the smallest sandbox that still runs every kind of component.
func upArgs(dir string, extra ...string) []string {
	return append([]string{"dev", "up", "--no-slurm", "--spokes", "1", "--nodes", "2", "--samples", "1", "--dir", dir}, extra...)
}

// foreground is a `dev up` whose stdout is a pipe the test reads.
type foreground struct {
	cmd    *exec.Cmd
	out    *os.File // the pipe's read end
	mu     sync.Mutex
	text   bytes.Buffer
	exited chan struct{}
	state  *os.ProcessState
	// seen are the descendants seen while waiting for the start.
	seen map[int]proc
}

func startForeground(t *testing.T, dir string) *foreground {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	f := &foreground{out: r, exited: make(chan struct{}), seen: map[int]proc{}}
	f.cmd = exec.Command(cliPath, upArgs(dir)...)
	f.cmd.Dir = repo
	f.cmd.Stdout = w
	f.cmd.Stderr = &lockedWriter{f: f}
	// A process group of its own, as a shell gives a foreground job, so a
	// SIGINT to the group is what Ctrl-C does.
	f.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := f.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	go func() {
		s := bufio.NewScanner(r)
		for s.Scan() {
			f.mu.Lock()
			f.text.WriteString(s.Text() + "\n")
			f.mu.Unlock()
		}
	}()
	go func() {
		_ = f.cmd.Wait()
		f.state = f.cmd.ProcessState
		close(f.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-f.exited:
		default:
			_ = syscall.Kill(-f.cmd.Process.Pid, syscall.SIGKILL)
			<-f.exited
		}
		r.Close()
	})
	return f
}

type lockedWriter struct{ f *foreground }

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.f.mu.Lock()
	defer l.f.mu.Unlock()
	return l.f.text.Write(p)
}

func (f *foreground) output() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.text.String()
}

// ready waits until dev up is ready, and reports false if it exited
// before.
func (f *foreground) ready(g *WithT) bool {
	var ok bool
	g.Eventually(func(g Gomega) {
		select {
		case <-f.exited:
			return
		default:
		}
		for _, p := range descendants(f.cmd.Process.Pid) {
			f.seen[p.pid] = p
		}
		g.Expect(f.output()).To(ContainSubstring("one line per Dispatch change follows"))
		ok = true
	}, 8*time.Minute, time.Second).Should(Succeed())
	return ok
}

// startReady starts dev up until one start gets ready: on a loaded machine
// envtest's fixed waits (10 s for CRDs to be served) may give up. A failed
// start must leave nothing behind either.
func startReady(t *testing.T, g *WithT, dir string) *foreground {
	t.Helper()
	for try := 1; ; try++ {
		f := startForeground(t, dir)
		if f.ready(g) {
			return f
		}
		t.Logf("start %d failed:\n%s", try, f.output())
		g.Expect(f.state.Success()).To(BeFalse())
		g.Expect(f.output()).To(ContainSubstring("error:"))
		var seen []proc
		for _, p := range f.seen {
			seen = append(seen, p)
		}
		expectAllGone(g, seen, dir)
		if try == 3 {
			t.Fatalf("dev up did not get ready in %d starts", try)
		}
	}
}

func (f *foreground) waitExitedCleanly(g *WithT) {
	g.Eventually(f.exited, 3*time.Minute, time.Second).Should(BeClosed(), "dev up did not exit:\n%s", f.output())
	ws := f.state.Sys().(syscall.WaitStatus)
	g.Expect(ws.Signaled()).To(BeFalse(), "dev up was killed by %v before it could clean up", ws.Signal())
	g.Expect(ws.ExitStatus()).To(Equal(0), "dev up:\n%s", f.output())
}

func TestCtrlCStopsEverything(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	f := startReady(t, g, dir)
	procs := sandboxProcesses(g, f.cmd.Process.Pid)
	g.Expect(syscall.Kill(-f.cmd.Process.Pid, syscall.SIGINT)).To(Succeed())
	f.waitExitedCleanly(g)
	expectAllGone(g, procs, dir)
}

func TestSIGTERMStopsEverything(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	f := startReady(t, g, dir)
	procs := sandboxProcesses(g, f.cmd.Process.Pid)
	g.Expect(f.cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
	f.waitExitedCleanly(g)
	expectAllGone(g, procs, dir)
}

// TestClosedPipeStopsEverything closes the reader of dev up's output, as
// `trainyard dev up | head` does: dev up must notice, must not die of
// SIGPIPE, and must stop everything.
func TestClosedPipeStopsEverything(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	f := startReady(t, g, dir)
	procs := sandboxProcesses(g, f.cmd.Process.Pid)
	g.Expect(f.out.Close()).To(Succeed())
	f.waitExitedCleanly(g)
	expectAllGone(g, procs, dir)
}

func TestDetachThenDown(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	up := exec.Command(cliPath, upArgs(dir, "--detach", "--timeout", "8m")...)
	up.Dir = repo
	out, err := up.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "dev up --detach:\n%s", out)
	g.Expect(string(out)).To(ContainSubstring("KUBECONFIG=" + filepath.Join(dir, "hub", "admin.kubeconfig")))
	g.Expect(string(out)).To(ContainSubstring("dev down --dir " + dir))
	raw, err := os.ReadFile(filepath.Join(dir, "sandbox.pid"))
	g.Expect(err).NotTo(HaveOccurred())
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	g.Expect(err).NotTo(HaveOccurred())
	procs := sandboxProcesses(g, pid)

	again := exec.Command(cliPath, upArgs(dir, "--detach")...)
	again.Dir = repo
	out, err = again.CombinedOutput()
	g.Expect(err).To(HaveOccurred(), "a second sandbox in the same folder must be refused:\n%s", out)
	g.Expect(string(out)).To(ContainSubstring(fmt.Sprintf("a sandbox runs in %s already (pid %d)", dir, pid)))

	down := exec.Command(cliPath, "dev", "down", "--dir", dir)
	out, err = down.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "dev down:\n%s", out)
	g.Expect(string(out)).To(ContainSubstring("stopped in"))
	// dev down returns once the sandbox's process has exited, which stops
	// its children first: nothing may be left even at once.
	g.Expect(alive(proc{pid: pid, start: startTime(pid)})).To(BeFalse())
	expectAllGone(g, procs, dir)
	g.Expect(filepath.Join(dir, "sandbox.pid")).NotTo(BeAnExistingFile())

	out, err = exec.Command(cliPath, "dev", "down", "--dir", dir).CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(out)).To(ContainSubstring("no sandbox runs in " + dir))
}

// proc is a process as /proc showed it; the start time tells a reused pid.
type proc struct {
	pid     int
	start   string
	cmdline string
}

// descendants returns every descendant of root.
func descendants(root int) []proc {
	parents := map[int]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			parents[pid] = parentOf(pid)
		}
	}
	var procs []proc
	for pid := range parents {
		for p := parents[pid]; p > 1; p = parents[p] {
			if p == root {
				procs = append(procs, proc{pid: pid, start: startTime(pid), cmdline: cmdline(pid)})
				break
			}
		}
	}
	return procs
}

// sandboxProcesses returns every descendant of root, and checks that the
// control planes and components of the sandbox are among them, so that
// "all gone" means something.
func sandboxProcesses(g *WithT, root int) []proc {
	procs := descendants(root)
	names := map[string]int{}
	for _, p := range procs {
		names[filepath.Base(strings.Fields(p.cmdline + " x")[0])]++
	}
	for _, want := range []string{"etcd", "kube-apiserver", "kwok", "kueue", "jobset", "kube-controller-manager", "kube-scheduler"} {
		g.Expect(names).To(HaveKey(want), "the sandbox's processes: %v", names)
	}
	g.Expect(names["etcd"]).To(Equal(2), "one etcd for the hub and one for the spoke: %v", names)
	return procs
}

// expectAllGone waits until none of procs runs any more and no process's
// command line names the sandbox's folder.
func expectAllGone(g *WithT, procs []proc, dir string) {
	g.Eventually(func() []string {
		var left []string
		for _, p := range procs {
			if alive(p) {
				left = append(left, fmt.Sprintf("%d %s", p.pid, p.cmdline))
			}
		}
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			if pid, err := strconv.Atoi(e.Name()); err == nil && strings.Contains(cmdline(pid), dir) {
				left = append(left, fmt.Sprintf("%d %s", pid, cmdline(pid)))
			}
		}
		return left
	}, 30*time.Second, 500*time.Millisecond).Should(BeEmpty())
}

func alive(p proc) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid))
	if err != nil {
		return false
	}
	f := statFields(stat)
	// A zombie has exited; a different start time is another process.
	return len(f) > 19 && f[0] != "Z" && f[19] == p.start
}

func startTime(pid int) string {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	if f := statFields(stat); len(f) > 19 {
		return f[19]
	}
	return ""
}

func parentOf(pid int) int {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := statFields(stat)
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// statFields are /proc/PID/stat's fields after the command name: state,
// ppid, ... (starttime is the 20th of them).
func statFields(stat []byte) []string {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(stat[i+1:]))
}

func cmdline(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

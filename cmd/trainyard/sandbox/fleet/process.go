package fleet

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Process is one component binary the harness runs, with its output in a
// log file so a failing test can show what the component said.
type Process struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
}

// startProcess runs bin with args, logging to dir/name.log. The process gets
// its own process group so Stop also ends anything it spawned.
func startProcess(dir, name, bin string, args ...string) (*Process, error) {
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Pdeathsig: a test binary that dies without cleanup must not leak
	// control-plane processes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		unguard(cmd.Process.Pid)
		close(p.done)
	}()
	// The scan also finds envtest's kube-apiserver and etcd, started
	// before a cluster's first component.
	if err := guardChildren(); err != nil {
		p.Stop(5 * time.Second)
		return nil, err
	}
	return p, nil
}

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop sends SIGTERM to the process group and SIGKILL after grace.
func (p *Process) Stop(grace time.Duration) {
	if exited, _ := p.Exited(); exited {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// Pid is the process's ID (a benchmark reads its CPU time from /proc).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// LogTail returns the last n bytes of the process log.
func (p *Process) LogTail(n int) string { return Tail(p.LogPath, n) }

// Tail returns the last n bytes of a log file, from the first whole line.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// FreePort returns a free loopback TCP port for a component to listen on.
// It is chosen below the kernel's ephemeral range, never handed out twice
// by this process: a port the kernel picks (":0") is an ephemeral one, and
// between this check and the component's bind the many client connections
// of a test run can take it ("bind: address already in use").
func FreePort() (int, error) {
	low := ephemeralLow()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 200 {
		port := low - 1 - rand.IntN(min(low-1024, 12000))
		if portsGiven[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		portsGiven[port] = true
		return port, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// ephemeralLow is the lowest port the kernel hands out on its own
// (net.ipv4.ip_local_port_range), 32768 when it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	var low, high int
	if _, err := fmt.Sscan(string(b), &low, &high); err != nil || low <= 2048 {
		return 32768
	}
	return low
}

// waitHTTPOK polls url until it answers 200, the process exits, or ctx ends.
func waitHTTPOK(ctx context.Context, p *Process, url string) error {
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if exited, perr := p.Exited(); exited {
			return fmt.Errorf("%s exited (%v) before %s was ready:\n%s", p.Name, perr, url, p.LogTail(3000))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s: %w\n%s", p.Name, url, ctx.Err(), p.LogTail(3000))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitTCP waits until addr accepts connections, the process exits, or ctx ends.
func waitTCP(ctx context.Context, p *Process, addr string) error {
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return conn.Close()
		}
		if exited, perr := p.Exited(); exited {
			return fmt.Errorf("%s exited (%v) before it listened on %s:\n%s", p.Name, perr, addr, p.LogTail(3000))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not listening on %s: %w\n%s", p.Name, addr, ctx.Err(), p.LogTail(3000))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

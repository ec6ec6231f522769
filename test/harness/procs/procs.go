// Package procs runs trainyard's own binaries as separate OS processes, for
// tests that crash them for real: Build compiles the commands once, a
// Process starts with its flags, dies by SIGKILL and starts again, and
// every life appends to one log file. Credentials reach the processes as
// kubeconfig files (WriteKubeconfig), never on the command line.
package procs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
)

// Build compiles the main packages (import paths relative to the
// repository root, e.g. "./cmd/trainyard-hub") into dir and returns each
// binary's path by its base name.
func Build(ctx context.Context, dir string, pkgs ...string) (map[string]string, error) {
	if len(pkgs) == 0 {
		return nil, errors.New("procs: nothing to build")
	}
	root, err := kube.RepoRoot()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	args := append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("procs: go build %v: %w\n%s", pkgs, err, out)
	}
	bins := map[string]string{}
	for _, p := range pkgs {
		name := filepath.Base(p)
		bins[name] = filepath.Join(dir, name)
		if _, err := os.Stat(bins[name]); err != nil {
			return nil, fmt.Errorf("procs: %s was not built: %w", name, err)
		}
	}
	return bins, nil
}

// Process is one binary with fixed arguments that can be started, killed
// and started again, as a supervisor restarts a crashed pod.
type Process struct {
	Name    string
	Bin     string
	Args    []string
	LogPath string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	err    error
	killed bool
	starts int
	// crashes are exits nobody asked for, with the end of the log.
	crashes []string
}

// New returns a stopped process that logs to logPath.
func New(name, bin, logPath string, args ...string) *Process {
	return &Process{Name: name, Bin: bin, Args: args, LogPath: logPath}
}

// Start starts the process unless it runs. It gets its own process group
// and dies with the test binary (parent-death signal).
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.runningLocked() {
		return nil
	}
	logFile, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	p.starts++
	fmt.Fprintf(logFile, "==== procs: start %d of %s at %s\n", p.starts, p.Name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("procs: start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.err, p.killed = cmd, done, nil, false
	go func() {
		err := cmd.Wait()
		logFile.Close()
		p.mu.Lock()
		p.err = err
		if !p.killed {
			p.crashes = append(p.crashes, fmt.Sprintf("%s exited by itself (%v):\n%s", p.Name, err, fleet.Tail(p.LogPath, 3000)))
		}
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func (p *Process) runningLocked() bool {
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Running reports whether the process is alive.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runningLocked()
}

// Kill sends SIGKILL to the process group and waits until the process is
// reaped. It reports whether a running process was killed.
func (p *Process) Kill() bool {
	return p.signal(syscall.SIGKILL, 0)
}

// Stop sends SIGTERM, and SIGKILL after grace.
func (p *Process) Stop(grace time.Duration) {
	p.signal(syscall.SIGTERM, grace)
}

func (p *Process) signal(sig syscall.Signal, grace time.Duration) bool {
	p.mu.Lock()
	if !p.runningLocked() {
		p.mu.Unlock()
		return false
	}
	p.killed = true
	pid, done := p.cmd.Process.Pid, p.done
	p.mu.Unlock()
	_ = syscall.Kill(-pid, sig)
	if sig != syscall.SIGKILL {
		select {
		case <-done:
			return true
		case <-time.After(grace):
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
	<-done
	return true
}

// Pid is the process id of the running process, 0 when it is not running.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.runningLocked() {
		return 0
	}
	return p.cmd.Process.Pid
}

// Starts is how many times the process was started.
func (p *Process) Starts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts
}

// Crashes lists the exits nobody asked for, each with the end of the log.
func (p *Process) Crashes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.crashes...)
}

// LogTail returns the last n bytes of the process log.
func (p *Process) LogTail(n int) string { return fleet.Tail(p.LogPath, n) }

// WriteKubeconfig writes cfg (server, CA, client certificate or bearer
// token) as a kubeconfig file only its owner can read.
func WriteKubeconfig(path string, cfg *rest.Config) error {
	if cfg.Host == "" {
		return errors.New("procs: kubeconfig without a server")
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData,
		CertificateAuthority: cfg.CAFile, InsecureSkipTLSVerify: cfg.Insecure}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData,
		ClientCertificate: cfg.CertFile, ClientKey: cfg.KeyFile, Token: cfg.BearerToken}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	raw, err := clientcmd.Write(*kc)
	if err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o600)
}

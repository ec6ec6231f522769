package fleet

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The guard kills this process's control planes and components when the
// process dies without stopping them: SIGKILL, a panic, a test timeout.
// Components started here get a parent-death signal, but envtest starts
// kube-apiserver and etcd without one, so a guard shell in a session of its
// own holds the read end of a pipe only this process writes: when the
// process dies, the shell reads EOF and kills every process still
// registered, if it is still the same program with the same command line
// (so a reused pid is never hit). Stopping a process unregisters it.
var guard struct {
	once sync.Once
	mu   sync.Mutex
	w    io.WriteCloser
	err  error
	// known are the registered pids.
	known map[int]bool
}

const guardScript = `
declare -A cmd
while IFS=$'\t' read -r pid exe line; do
  case "$pid" in
    -*) unset "cmd[${pid#-}]" ;;
    *) cmd[$pid]="$exe"$'\t'"$line" ;;
  esac
done
for pid in "${!cmd[@]}"; do
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || continue
  line=$(tr '\0\t\n' '   ' < "/proc/$pid/cmdline" 2>/dev/null)
  [ "$exe"$'\t'"$line" = "${cmd[$pid]}" ] || continue
  kill -KILL -- "-$pid" 2>/dev/null
  kill -KILL "$pid" 2>/dev/null
done
`

func startGuard() (io.WriteCloser, error) {
	cmd := exec.Command("bash", "-c", guardScript)
	// A session of its own: a Ctrl-C to our process group must not end it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	w, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the process guard: %w", err)
	}
	go func() { _ = cmd.Wait() }()
	return w, nil
}

// guardChildren registers this process's children that run a binary of the
// tool folder (envtest's kube-apiserver and etcd, and the components) with
// the guard.
func guardChildren() error {
	guard.once.Do(func() {
		guard.w, guard.err = startGuard()
		guard.known = map[int]bool{}
	})
	if guard.err != nil {
		return guard.err
	}
	ours, err := toolBinaries()
	if err != nil {
		return err
	}
	guard.mu.Lock()
	defer guard.mu.Unlock()
	self := os.Getpid()
	procs, _ := os.ReadDir("/proc")
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || guard.known[pid] || parentOf(pid) != self {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || !ours[exe] {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		line := strings.NewReplacer("\x00", " ", "\t", " ", "\n", " ").Replace(string(raw))
		if _, err := fmt.Fprintf(guard.w, "%d\t%s\t%s\n", pid, exe, line); err != nil {
			return fmt.Errorf("process guard: %w", err)
		}
		guard.known[pid] = true
	}
	return nil
}

// unguard unregisters a process that has been stopped.
func unguard(pid int) {
	guard.mu.Lock()
	defer guard.mu.Unlock()
	if guard.w == nil || !guard.known[pid] {
		return
	}
	delete(guard.known, pid)
	_, _ = fmt.Fprintf(guard.w, "-%d\n", pid)
}

// toolBinaries are the resolved paths of the tool folder's binaries (its
// entries are links into the tools' build cache).
func toolBinaries() (map[string]bool, error) {
	dir, err := BinDir()
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	ours := map[string]bool{}
	for _, e := range entries {
		if p, err := filepath.EvalSymlinks(filepath.Join(dir, e.Name())); err == nil {
			ours[p] = true
		}
	}
	return ours, nil
}

// StopStrays kills what is left of this process's children that run a
// binary of the tool folder, with their process groups, and waits until
// they have exited. envtest leaves a kube-apiserver that failed to become
// ready running when it gives up; a sandbox calls this after stopping its
// clusters, so that nothing outlives it.
func StopStrays(timeout time.Duration) error {
	ours, err := toolBinaries()
	if err != nil {
		return err
	}
	self := os.Getpid()
	var strays []int
	procs, _ := os.ReadDir("/proc")
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || parentOf(pid) != self {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && ours[exe] {
			strays = append(strays, pid)
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	deadline := time.Now().Add(timeout)
	for _, pid := range strays {
		for running(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("process %d did not exit after SIGKILL", pid)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// running reports whether pid has not exited (a zombie has).
func running(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

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

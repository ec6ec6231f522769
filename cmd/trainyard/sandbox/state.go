package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// A sandbox keeps its state in its folder: the pid of the process running
// it, its log when it runs in the background, and, once it is ready, how
// to reach it.
const (
	pidFile   = "sandbox.pid"
	logFile   = "sandbox.log"
	readyFile = "sandbox.ready"
)

// LogPath is the log of a sandbox running in the background in dir.
func LogPath(dir string) string { return filepath.Join(dir, logFile) }

// ReadyPath holds, once the sandbox in dir is ready, how to reach it.
func ReadyPath(dir string) string { return filepath.Join(dir, readyFile) }

// Running returns the pid of the process that runs the sandbox in dir, if
// one runs: that process holds a lock on the pid file (Claim) until it
// exits, however it exits.
func Running(dir string) (int, bool) {
	f, err := os.Open(filepath.Join(dir, pidFile))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err == nil {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return 0, false
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, true
}

// Alive reports whether pid is a process that has not exited (a zombie
// has).
func Alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	return b[i+2] != 'Z' && b[i+2] != 'X'
}

// claimed is the pid file this process holds locked.
var claimed *os.File

// Claim records this process as the one running the sandbox in dir, or
// fails if another one runs it. The lock it takes lasts until Release or
// the process's end.
func Claim(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, pidFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		pid, _ := Running(dir)
		return fmt.Errorf("a sandbox runs in %s already (pid %d): stop it with `trainyard dev down --dir %s`", dir, pid, dir)
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return err
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
		f.Close()
		return err
	}
	claimed = f
	return nil
}

// Release removes the pid and ready files of this process's sandbox and
// lets go of its lock.
func Release(dir string) {
	if claimed == nil {
		return
	}
	_ = os.Remove(filepath.Join(dir, pidFile))
	_ = os.Remove(ReadyPath(dir))
	_ = claimed.Close()
	claimed = nil
}

// MarkReady writes how to reach the sandbox in dir.
func MarkReady(dir, text string) error {
	tmp := ReadyPath(dir) + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, ReadyPath(dir))
}

// clean empties dir of a previous sandbox, keeping the state files of
// this one.
func clean(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		switch e.Name() {
		case pidFile, logFile:
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// Signal sends sig to the process running the sandbox in dir.
func Signal(dir string, sig syscall.Signal) (int, error) {
	pid, ok := Running(dir)
	if !ok {
		return 0, fmt.Errorf("no sandbox runs in %s", dir)
	}
	return pid, syscall.Kill(pid, sig)
}

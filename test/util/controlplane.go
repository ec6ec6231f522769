package util

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
)

// APIServerPID is the process id of c's kube-apiserver. envtest starts it
// as a child of the test process and keeps the process to itself, so it is
// found in /proc: the child kube-apiserver whose --secure-port is the port
// of c.Config.Host. A test freezes it (SIGSTOP) to make a control-plane
// outage its clients see as hung connections.
func APIServerPID(c *kube.Cluster) (int, error) {
	u, err := url.Parse(c.Config.Host)
	if err != nil {
		return 0, err
	}
	return childPID("kube-apiserver", "--secure-port="+u.Port())
}

// EtcdPID is the process id of the etcd c's kube-apiserver stores in: the
// child etcd listening at the API server's --etcd-servers.
func EtcdPID(c *kube.Cluster) (int, error) {
	apiserver, err := APIServerPID(c)
	if err != nil {
		return 0, err
	}
	servers := flagValue(Cmdline(apiserver), "--etcd-servers")
	if servers == "" {
		return 0, fmt.Errorf("%s: kube-apiserver %d has no --etcd-servers", c.Name, apiserver)
	}
	return childPID("etcd", "--listen-client-urls="+servers)
}

// Cmdline is the argument vector of process pid (nil once it has exited).
func Cmdline(pid int) []string {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil || len(raw) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
}

// childPID finds the one child of this process that runs a program named
// name with arg among its arguments.
func childPID(name, arg string) (int, error) {
	self := os.Getpid()
	entries, _ := os.ReadDir("/proc")
	var found []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || parentPID(pid) != self {
			continue
		}
		argv := Cmdline(pid)
		if len(argv) > 0 && filepath.Base(argv[0]) == name && slices.Contains(argv[1:], arg) {
			found = append(found, pid)
		}
	}
	if len(found) != 1 {
		return 0, fmt.Errorf("want one child process %s with %s, found %v", name, arg, found)
	}
	return found[0], nil
}

// flagValue is the value of --name=value in argv ("" if absent).
func flagValue(argv []string, name string) string {
	for _, a := range argv {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// parentPID is the parent of pid, from /proc/pid/status (0 if unknown).
func parentPID(pid int) int {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			ppid, _ := strconv.Atoi(strings.TrimSpace(v))
			return ppid
		}
	}
	return 0
}

package fleet

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

var reapOnce sync.Once

// reapOrphans kills harness binaries left by a test process that died
// without cleanup. envtest starts kube-apiserver and etcd without a
// parent-death signal, so a killed test binary leaks them; they are
// re-parented to init. A binary of the harness's bin folder whose parent is
// init is such a leftover: a live harness's children have the harness as
// parent, so they are never touched.
func reapOrphans() {
	reapOnce.Do(func() {
		dir, err := BinDir()
		if err != nil {
			return
		}
		ours := map[string]bool{}
		for _, name := range []string{"kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kwok", "jobset", "lws", "kueue", "hostpath-provisioner"} {
			if p, err := filepath.EvalSymlinks(filepath.Join(dir, name)); err == nil {
				ours[p] = true
			}
		}
		procs, _ := os.ReadDir("/proc")
		for _, e := range procs {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || parentOf(pid) != 1 {
				continue
			}
			exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
			if err == nil && ours[exe] {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
}

func parentOf(pid int) int {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; fields after its ')' are fixed.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

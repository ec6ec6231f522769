package bench

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/test/harness/procs"
)

// The groups a round's CPU time is read for. On this machine they share two
// cores; in production the hub and every spoke are clusters of their own.
const (
	groupHub       = "hub control plane"   // the hub's kube-apiserver, etcd and Kueue
	groupTrainyard = "trainyard and bench" // this process: trainyard's hub and agents, the bench's clients and watches
	groupSpokes    = "spokes"              // the spokes' control planes, JobSet controllers and kwok
	// When trainyard runs as processes of its own, they are one group and
	// this process, the bench's clients and watches, another.
	groupTrainyardProcs = "trainyard"
	groupBench          = "bench"
)

// clockTicks is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100
// on Linux).
const clockTicks = 100

// cpuMeter measures the CPU time a round used, per group, from /proc.
type cpuMeter struct {
	pids map[string][]int
	// parts are trainyard's processes one by one, printed within its group.
	parts []string
	start map[string]float64
	t0    time.Time
}

// newCPUMeter finds the processes of the fleet and reads their CPU time
// now; trainyard's hub and agents are in this process unless given as
// processes of their own.
func newCPUMeter(fleet *kube.Fleet, trainyard ...*procs.Process) *cpuMeter {
	m := &cpuMeter{pids: map[string][]int{groupTrainyard: {os.Getpid()}}}
	if len(trainyard) > 0 {
		m.pids = map[string][]int{groupBench: {os.Getpid()}}
		for _, p := range trainyard {
			m.pids[groupTrainyardProcs] = append(m.pids[groupTrainyardProcs], p.Pid())
			m.pids[p.Name] = append(m.pids[p.Name], p.Pid())
			m.parts = append(m.parts, p.Name)
		}
	}
	m.pids[groupHub] = clusterPids(fleet.Hub)
	for _, s := range fleet.Spokes {
		m.pids[groupSpokes] = append(m.pids[groupSpokes], clusterPids(s)...)
	}
	m.start, m.t0 = m.read(), time.Now()
	return m
}

func (m *cpuMeter) read() map[string]float64 {
	out := map[string]float64{}
	for g, pids := range m.pids {
		for _, pid := range pids {
			out[g] += cpuSeconds(pid)
		}
	}
	return out
}

// cell is the CPU seconds per job of each group since the meter started,
// and the cores the fleet kept busy meanwhile.
func (m *cpuMeter) cell(jobs int) string {
	now, wall := m.read(), time.Since(m.t0).Seconds()
	var parts []string
	total := 0.0
	for _, g := range []string{groupHub, groupTrainyard, groupTrainyardProcs, groupBench, groupSpokes} {
		used := now[g] - m.start[g]
		total += used
		if used <= 0 {
			continue
		}
		part := fmt.Sprintf("%s %.3f", g, used/float64(jobs))
		if g == groupTrainyardProcs && len(m.parts) > 1 {
			var each []string
			for _, p := range m.parts {
				each = append(each, fmt.Sprintf("%s %.3f", p, (now[p]-m.start[p])/float64(jobs)))
			}
			part += " (" + strings.Join(each, ", ") + ")"
		}
		parts = append(parts, part)
	}
	return fmt.Sprintf("%s (%.1f cores busy)", strings.Join(parts, " · "), total/wall)
}

// clusterPids are the processes of one cluster: the components the harness
// started and envtest's kube-apiserver and etcd, found by the API server's
// port and the etcd URL on its command line.
func clusterPids(c *kube.Cluster) []int {
	var pids []int
	for _, p := range c.Processes() {
		pids = append(pids, p.Pid())
	}
	u, err := url.Parse(c.Config.Host)
	if err != nil {
		return pids
	}
	cmdlines := map[int][]string{}
	entries, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, e := range entries {
		raw, err := os.ReadFile(e)
		if err != nil || len(raw) == 0 {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(e)))
		if err != nil {
			continue
		}
		cmdlines[pid] = strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	}
	etcd := ""
	for pid, args := range cmdlines {
		if filepath.Base(args[0]) == "kube-apiserver" && hasArg(args, "--secure-port", u.Port()) {
			pids = append(pids, pid)
			etcd = argValue(args, "--etcd-servers")
		}
	}
	for pid, args := range cmdlines {
		if etcd != "" && filepath.Base(args[0]) == "etcd" && hasArg(args, "--listen-client-urls", etcd) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func argValue(args []string, flag string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

func hasArg(args []string, flag, value string) bool { return argValue(args, flag) == value }

// cpuSeconds is the user and system CPU time of pid (0 once it is gone).
func cpuSeconds(pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may hold spaces: fields count from after its ")".
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / clockTicks
}

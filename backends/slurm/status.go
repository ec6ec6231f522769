package slurm

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
)

// Base job states that mean the job is over (flags such as COMPLETING are
// listed next to them while processes are still being cleaned up).
var finalStates = []string{"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
	"OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}

func has(j *JobInfo, state string) bool { return slices.Contains(j.JobState, state) }

// Ended reports whether the job is over and no process of it is left.
func Ended(j *JobInfo) bool {
	if has(j, "COMPLETING") || has(j, "REQUEUED") {
		return false
	}
	for _, s := range finalStates {
		if has(j, s) {
			return true
		}
	}
	return false
}

// StatusOf maps a Slurm job onto a Dispatch phase. A job Slurm requeued
// itself (after a node failure or preemption, when the runtime allows
// restarts) is back to Submitted, not failed.
func StatusOf(j *JobInfo) *backends.Status {
	st := &backends.Status{}
	if t := unixTime(j.StartTime); t != nil && !has(j, "PENDING") {
		st.StartTime = t
	}
	where := fmt.Sprintf("Slurm job %d", j.JobID)
	switch {
	case has(j, "PENDING") || has(j, "REQUEUED") || has(j, "REQUEUE_HOLD"):
		st.Phase = v1alpha1.DispatchSubmitted
		st.Message = where + " pending"
		if j.StateReason != "" && j.StateReason != "None" {
			st.Message += " (" + j.StateReason + ")"
		}
		if j.RestartCount > 0 || has(j, "REQUEUED") {
			st.Reason = v1alpha1.ReasonSlurmRequeued
			st.Message = fmt.Sprintf("%s requeued by Slurm (restart %d)", where, j.RestartCount)
		}
	case has(j, "RUNNING") || has(j, "CONFIGURING") || has(j, "SUSPENDED"):
		st.Phase = v1alpha1.DispatchRunning
		st.Message = fmt.Sprintf("%s running on %s", where, j.Nodes)
		if has(j, "SUSPENDED") {
			st.Message = where + " suspended"
		}
		st.Replicas = []v1alpha1.ReplicaStatus{{Name: "node", Active: nodeCount(j)}}
	case has(j, "COMPLETED"):
		st.Phase = v1alpha1.DispatchSucceeded
		st.Message = where + " completed"
		st.ExitCode = exitCode(j)
		st.Replicas = []v1alpha1.ReplicaStatus{{Name: "node", Succeeded: nodeCount(j)}}
	case has(j, "CANCELLED") && j.StateReason == "DependencyNeverSatisfied":
		// Held after the job that makes its work directory (workdir.go),
		// which failed: the job never started.
		st.Phase, st.Reason = v1alpha1.DispatchFailed, v1alpha1.ReasonRemoteFailed
		st.Message = fmt.Sprintf("%s never started: the job that makes its user's work directory (%s) failed; the user must be able to create it, or the administrator creates it (spec.slurm.workDir)", where, WorkDirJobName)
	case has(j, "CANCELLED"):
		st.Phase = v1alpha1.DispatchCancelled
		st.Message = where + " cancelled"
		st.ExitCode = exitCode(j)
	default:
		st.Phase = v1alpha1.DispatchFailed
		st.ExitCode = exitCode(j)
		st.Reason, st.Message = failure(j, where)
		st.Replicas = []v1alpha1.ReplicaStatus{{Name: "node", Failed: nodeCount(j)}}
	}
	if j.UserID != nil {
		uid := int64(uint32(*j.UserID)) // slurmrestd prints uids as int32
		st.UserID = &uid
	}
	if st.Phase.IsFinal() {
		st.CompletionTime = unixTime(j.EndTime)
		if has(j, "COMPLETING") {
			// Processes are still being killed: not over yet.
			st.Phase, st.CompletionTime = v1alpha1.DispatchRunning, nil
			st.Message = where + " completing"
		}
	}
	return st
}

func failure(j *JobInfo, where string) (reason, msg string) {
	code := exitCode(j)
	detail := ""
	if code != nil {
		detail = fmt.Sprintf(", exit code %d", *code)
	}
	if j.StateReason != "" && j.StateReason != "None" {
		detail += " (" + j.StateReason + ")"
	}
	switch {
	case has(j, "TIMEOUT"):
		return v1alpha1.ReasonSlurmTimeLimit, where + " reached its time limit" + detail
	case has(j, "NODE_FAIL"):
		return v1alpha1.ReasonSlurmNodeFail, where + " failed: a node of the allocation failed" + detail
	case has(j, "PREEMPTED"):
		return v1alpha1.ReasonSlurmPreempted, where + " was preempted by Slurm" + detail
	case has(j, "OUT_OF_MEMORY"):
		return v1alpha1.ReasonSlurmOutOfMemory, where + " ran out of memory" + detail
	case has(j, "BOOT_FAIL"), has(j, "DEADLINE"):
		return v1alpha1.ReasonRemoteFailed, fmt.Sprintf("%s ended %s%s", where, strings.Join(j.JobState, ","), detail)
	}
	return v1alpha1.ReasonRemoteFailed, where + " failed" + detail
}

// exitCode is the batch script's exit status, or 128+signal when a signal
// ended it, as a shell would report it.
func exitCode(j *JobInfo) *int32 {
	if j.ExitCode == nil {
		return nil
	}
	if j.ExitCode.Signal != nil {
		if sig, ok := j.ExitCode.Signal.ID.value(); ok && sig > 0 {
			c := int32(128 + sig)
			return &c
		}
	}
	if rc, ok := j.ExitCode.ReturnCode.value(); ok {
		c := int32(rc)
		return &c
	}
	return nil
}

func nodeCount(j *JobInfo) int32 {
	if n, ok := j.NodeCount.value(); ok {
		return int32(n)
	}
	return 0
}

func unixTime(v *noVal) *metav1.Time {
	s, ok := v.value()
	if !ok || s <= 0 {
		return nil
	}
	t := metav1.NewTime(time.Unix(s, 0))
	return &t
}

// Node states in which a node takes no new work.
var unusable = []string{"DOWN", "DRAIN", "FAIL", "FUTURE", "NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN",
	"MAINTENANCE", "REBOOT_REQUESTED", "REBOOT_ISSUED", "INVALID", "UNKNOWN"}

func usable(n *NodeInfo) bool {
	for _, s := range unusable {
		if slices.Contains(n.State, s) {
			return false
		}
	}
	return true
}

// CapacityOf sums the nodes of the given partitions: GPUs (GRES gpu) and
// CPUs, free ones only on nodes that take work, with the topology domains
// and each node's free GPUs for placement.
func CapacityOf(nodes []NodeInfo, partitions map[string]bool, topo *Topology) *backends.Capacity {
	var gpus, freeGPUs, cpus, freeCPUs, largest int64
	type entry struct {
		name string
		free int64
		path []string
	}
	var entries []entry
	for i := range nodes {
		n := &nodes[i]
		in := false
		for _, p := range n.Partitions {
			in = in || partitions[p]
		}
		if !in {
			continue
		}
		total := gresCount(n.Gres)
		free := int64(0)
		idleCPUs := int64(0)
		if usable(n) {
			free = max(total-gresCount(n.GresUsed), 0)
			idleCPUs = max(n.CPUs-n.AllocCPUs, 0)
		}
		gpus, freeGPUs, cpus, freeCPUs = gpus+total, freeGPUs+free, cpus+n.CPUs, freeCPUs+idleCPUs
		largest = max(largest, total)
		var path []string
		if topo != nil {
			path = topo.Path[n.Name]
			if path == nil && len(topo.Levels) > 0 {
				// A node outside topology.conf is its own domain at every level.
				path = slices.Repeat([]string{"none"}, len(topo.Levels))
			}
		}
		entries = append(entries, entry{n.Name, free, path})
	}
	levels := []string{HostnameLevel}
	if topo != nil {
		levels = append(slices.Clone(topo.Levels), HostnameLevel)
	}
	ts := &v1alpha1.TopologyStatus{Levels: levels}
	sort.Slice(entries, func(i, j int) bool {
		if c := slices.Compare(entries[i].path, entries[j].path); c != 0 {
			return c < 0
		}
		return entries[i].name < entries[j].name
	})
	for _, e := range entries {
		k := len(ts.Domains) - 1
		if k < 0 || !slices.Equal(ts.Domains[k].Values, e.path) {
			ts.Domains = append(ts.Domains, v1alpha1.TopologyDomain{Values: slices.Clone(e.path)})
			k++
		}
		if ts.Domains[k].Values == nil {
			ts.Domains[k].Values = []string{}
		}
		ts.Domains[k].Nodes = append(ts.Domains[k].Nodes, e.name)
		ts.Domains[k].FreeGPUsPerNode = append(ts.Domains[k].FreeGPUsPerNode, int32(e.free))
	}
	return &backends.Capacity{
		Capacity: corev1.ResourceList{
			v1alpha1.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI),
			corev1.ResourceCPU:   *resource.NewQuantity(cpus, resource.DecimalSI),
		},
		Free: corev1.ResourceList{
			v1alpha1.GPUResource: *resource.NewQuantity(freeGPUs, resource.DecimalSI),
			corev1.ResourceCPU:   *resource.NewQuantity(freeCPUs, resource.DecimalSI),
		},
		Topology:       ts,
		MaxGPUsPerNode: largest,
	}
}

// gresCount sums the gpu entries of a GRES string such as
// "gpu:h100:4(S:0),shard:8" or "gpu:h100:2(IDX:0-1)".
func gresCount(gres string) int64 {
	var n int64
	for _, item := range splitTopLevelParens(gres) {
		if i := strings.IndexByte(item, '('); i >= 0 {
			item = item[:i]
		}
		parts := strings.Split(item, ":")
		if len(parts) < 2 || parts[0] != "gpu" {
			continue
		}
		if c, err := strconv.ParseInt(parts[len(parts)-1], 10, 64); err == nil {
			n += c
		}
	}
	return n
}

// splitTopLevelParens splits on commas outside parentheses.
func splitTopLevelParens(s string) []string {
	var parts []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	if start < len(s) {
		parts = append(parts, s[start:])
	}
	return parts
}

package placement

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// MilliCPU and Memory are the request's totals.
func (r Request) MilliCPU() int64 {
	var n int64
	for _, ps := range r.PodSets {
		n += int64(ps.Count) * ps.MilliCPUPerPod
	}
	return n
}

// Memory is the request's total memory in bytes.
func (r Request) Memory() int64 {
	var n int64
	for _, ps := range r.PodSets {
		n += int64(ps.Count) * ps.MemoryPerPod
	}
	return n
}

// noRoomForCPUOrMemory compares the job's CPU and memory with what the
// target last published as free. Targets publish totals, not per node, so
// this is the whole-target check; the remote scheduler does the rest. A
// target that publishes no figure for a resource is not held to it.
func noRoomForCPUOrMemory(req Request, free corev1.ResourceList) string {
	var short []string
	if q, ok := free[corev1.ResourceCPU]; ok && req.MilliCPU() > q.MilliValue() {
		short = append(short, fmt.Sprintf("%s CPU free, job needs %s", q.String(), milli(req.MilliCPU())))
	}
	if q, ok := free[corev1.ResourceMemory]; ok && req.Memory() > q.Value() {
		short = append(short, fmt.Sprintf("%s memory free, job needs %s", q.String(), bytesOf(req.Memory())))
	}
	return strings.Join(short, ", ")
}

// neverFitsCPUOrMemory: the job asks for more CPU or memory than every
// serving target has in all, when all of them publish it.
func neverFitsCPUOrMemory(req Request, serving []*v1alpha1.Target) string {
	if len(serving) == 0 || (req.MilliCPU() == 0 && req.Memory() == 0) {
		return ""
	}
	var why []string
	for _, t := range serving {
		total := t.Status.Capacity
		cpu, okCPU := total[corev1.ResourceCPU]
		mem, okMem := total[corev1.ResourceMemory]
		switch {
		case okCPU && req.MilliCPU() > cpu.MilliValue():
			why = append(why, fmt.Sprintf("%s has %s CPU in all", t.Name, cpu.String()))
		case okMem && req.Memory() > mem.Value():
			why = append(why, fmt.Sprintf("%s has %s memory in all", t.Name, mem.String()))
		default:
			return ""
		}
	}
	return fmt.Sprintf("the job needs %s CPU and %s memory; %s", milli(req.MilliCPU()), bytesOf(req.Memory()), strings.Join(why, ", "))
}

func milli(n int64) string { return resource.NewMilliQuantity(n, resource.DecimalSI).String() }

func bytesOf(n int64) string { return resource.NewQuantity(n, resource.BinarySI).String() }

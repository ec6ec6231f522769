package dashboard

import (
	"slices"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/hubview"
)

// Geometry of the fleet map, in SVG pixels.
const (
	cellSize    = 18
	cellGap     = 3
	cellsPerRow = 8
	domainPad   = 8
	domainLabel = 16
	domainGap   = 12
	minDomainW  = 96
	mapMaxWidth = 960
)

// TargetView is one Target on the fleet map.
type TargetView struct {
	Name string
	Type string
	// Available is the Available condition's status (True, False or
	// Unknown) with its reason and message.
	Available        string
	AvailableReason  string
	AvailableMessage string
	Paused           bool
	// Heartbeat is the age of the agent's last report, or "never".
	Heartbeat string
	// GPUs are the totals of the last heartbeat; HasCapacity is false
	// before the agent reported any.
	FreeGPUs, UsedGPUs, TotalGPUs int64
	HasCapacity                   bool
	// Levels are the topology levels, widest first, the node level last.
	Levels []string
	Map    MapView
	// Jobs are the jobs whose live Dispatch runs here and has not ended.
	Jobs []PlacedJob
}

// MapView is a Target's topology drawn as boxes of node cells.
type MapView struct {
	Width, Height int
	Domains       []DomainView
}

// DomainView is one leaf topology domain: a box of node cells.
type DomainView struct {
	// Label is the domain's values joined by "/", or "all nodes".
	Label      string
	X, Y, W, H int
	Free, Used int64
	// Jobs counts the active jobs placed in this domain.
	Jobs  int
	Cells []CellView
}

// CellView is one node: a square whose lower part is shaded by the share
// of its GPUs in use.
type CellView struct {
	Node              string
	X, Y              int
	Free, Used, Total int32
	// UsedH is the height of the used shade; UsedY its top.
	UsedY, UsedH int
	// Job marks a node a job's topology assignment names.
	Job bool
}

// PlacedJob is an active job on a target, with the domains it was placed in.
type PlacedJob struct {
	Namespace, Name, Phase string
	Pods                   int32
	Domains                []string
	// Percent is the job's latest reported progress (nil: none); Stale
	// marks a report older than hubview.StaleReportAfter.
	Percent *int32
	Stale   bool
}

// buildFleet turns Targets and job summaries into the fleet map, targets
// sorted by name.
func buildFleet(targets []v1alpha1.Target, jobs []hubview.JobInfo, now time.Time) []TargetView {
	out := make([]TargetView, 0, len(targets))
	for i := range targets {
		out = append(out, targetView(&targets[i], jobs, now))
	}
	slices.SortFunc(out, func(a, b TargetView) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func targetView(t *v1alpha1.Target, jobs []hubview.JobInfo, now time.Time) TargetView {
	v := TargetView{Name: t.Name, Type: string(t.Spec.Type), Available: string(metav1.ConditionUnknown), Paused: t.Spec.Paused, Heartbeat: "never"}
	if c := apimeta.FindStatusCondition(t.Status.Conditions, v1alpha1.TargetAvailable); c != nil {
		v.Available, v.AvailableReason, v.AvailableMessage = string(c.Status), c.Reason, c.Message
	}
	if hb := t.Status.LastHeartbeatTime; hb != nil {
		v.Heartbeat = age(now, *hb) + " ago"
	}
	if total, ok := t.Status.Capacity[v1alpha1.GPUResource]; ok {
		v.HasCapacity, v.TotalGPUs, v.FreeGPUs = true, total.Value(), t.Status.FreeGPUs
		v.UsedGPUs = max(0, v.TotalGPUs-v.FreeGPUs)
	}
	for _, j := range jobs {
		if jobTarget(j) == t.Name && active(j.Phase) {
			v.Jobs = append(v.Jobs, placedJob(j, now))
		}
	}
	if topo := t.Status.Topology; topo != nil {
		v.Levels = topo.Levels
		v.Map = drawMap(topo, nodeSize(t), jobs, t.Name)
	}
	return v
}

// nodeSize is the GPUs a node is drawn with. Agents publish free GPUs per
// node only, so it is the target's largest node (maxGPUsPerNode), at least
// the most free on any node and the capacity spread over the nodes.
func nodeSize(t *v1alpha1.Target) int32 {
	size := int32(t.Status.MaxGPUsPerNode)
	nodes := 0
	for _, d := range t.Status.Topology.Domains {
		nodes += len(d.FreeGPUsPerNode)
		for _, f := range d.FreeGPUsPerNode {
			size = max(size, f)
		}
	}
	if total, ok := t.Status.Capacity[v1alpha1.GPUResource]; ok && nodes > 0 {
		size = max(size, int32((total.Value()+int64(nodes)-1)/int64(nodes)))
	}
	return size
}

// drawMap lays the leaf domains out left to right, wrapping at
// mapMaxWidth, each a grid of node cells.
func drawMap(topo *v1alpha1.TopologyStatus, size int32, jobs []hubview.JobInfo, target string) MapView {
	var m MapView
	x, y, rowH := 0, 0, 0
	for _, d := range topo.Domains {
		dv := domainView(d, size)
		marked := markedNodes(d, topo.Levels, jobs, target)
		for i := range dv.Cells {
			dv.Cells[i].Job = marked.nodes[dv.Cells[i].Node] || marked.domain > 0
		}
		dv.Jobs = marked.jobs
		if x > 0 && x+dv.W > mapMaxWidth {
			x, y, rowH = 0, y+rowH+domainGap, 0
		}
		dv.X, dv.Y = x, y
		for i := range dv.Cells {
			c := &dv.Cells[i]
			c.X, c.Y, c.UsedY = c.X+x, c.Y+y, c.UsedY+y
		}
		x += dv.W + domainGap
		rowH = max(rowH, dv.H)
		m.Width = max(m.Width, dv.X+dv.W)
		m.Domains = append(m.Domains, dv)
	}
	m.Height = y + rowH
	return m
}

// domainView draws one domain at the origin.
func domainView(d v1alpha1.TopologyDomain, size int32) DomainView {
	dv := DomainView{Label: domainLabelOf(d.Values)}
	n := len(d.FreeGPUsPerNode)
	cols := min(max(n, 1), cellsPerRow)
	rows := (n + cols - 1) / cols
	dv.W = max(minDomainW, 2*domainPad+cols*(cellSize+cellGap)-cellGap)
	dv.H = domainLabel + 2*domainPad + max(rows, 1)*(cellSize+cellGap) - cellGap
	for i, free := range d.FreeGPUsPerNode {
		node := ""
		if i < len(d.Nodes) {
			node = d.Nodes[i]
		}
		total := max(size, free)
		used := total - free
		usedH := 0
		if total > 0 {
			usedH = int(used) * cellSize / int(total)
		}
		cx := domainPad + (i%cols)*(cellSize+cellGap)
		cy := domainLabel + domainPad + (i/cols)*(cellSize+cellGap)
		dv.Cells = append(dv.Cells, CellView{
			Node: node, X: cx, Y: cy, Free: free, Used: used, Total: total,
			UsedY: cy + cellSize - usedH, UsedH: usedH,
		})
		dv.Free += int64(free)
		dv.Used += int64(used)
	}
	return dv
}

func domainLabelOf(values []string) string {
	if len(values) == 0 {
		return "all nodes"
	}
	return strings.Join(values, "/")
}

// marks are what the active jobs of a target name in one leaf domain.
type marks struct {
	// domain counts the pod set assignments of the whole domain or wider.
	domain int
	// nodes are the nodes assignments name one by one.
	nodes map[string]bool
	// jobs counts the jobs with pods in the domain.
	jobs int
}

// markedNodes finds the active jobs on target placed in leaf domain d of a
// topology with levels. An assignment names values of the target's levels
// from the widest: fewer values than the domain's mean a wider domain that
// holds it, one more is a node inside it.
func markedNodes(d v1alpha1.TopologyDomain, levels []string, jobs []hubview.JobInfo, target string) marks {
	m := marks{nodes: map[string]bool{}}
	for _, j := range jobs {
		if jobTarget(j) != target || !active(j.Phase) {
			continue
		}
		hit := false
		for _, ps := range j.PodSets {
			a := ps.Topology
			if a == nil || !slices.Equal(a.Levels, levels[:min(len(a.Levels), len(levels))]) {
				continue
			}
			for _, ad := range a.Domains {
				n := min(len(ad.Values), len(d.Values))
				if !slices.Equal(ad.Values[:n], d.Values[:n]) {
					continue
				}
				hit = true
				if len(ad.Values) > len(d.Values) {
					m.nodes[ad.Values[len(d.Values)]] = true
				} else {
					m.domain++
				}
			}
		}
		if hit {
			m.jobs++
		}
	}
	return m
}

func placedJob(j hubview.JobInfo, now time.Time) PlacedJob {
	p := PlacedJob{Namespace: j.Namespace, Name: j.Name, Phase: j.Phase}
	if r := j.Progress; r != nil && r.Percent != nil {
		p.Percent, p.Stale = r.Percent, hubview.StaleReport(j.Phase, r.Reported, now)
	}
	for _, ps := range j.PodSets {
		p.Pods += ps.Count
		if ps.Topology == nil {
			continue
		}
		for _, d := range ps.Topology.Domains {
			if l := domainLabelOf(d.Values); !slices.Contains(p.Domains, l) {
				p.Domains = append(p.Domains, l)
			}
		}
	}
	return p
}

// active says whether a job's phase is one that holds GPUs on a target.
func active(phase string) bool {
	switch v1alpha1.DispatchPhase(phase) {
	case v1alpha1.DispatchPending, v1alpha1.DispatchSubmitted, v1alpha1.DispatchRunning:
		return true
	}
	return false
}

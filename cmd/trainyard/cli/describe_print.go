package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/hubview"
)

// describer writes kubectl-describe style text: "Key:\tvalue" lines and
// indented tables. Each table is aligned on its own: the tab writer is
// flushed around it.
type describer struct {
	w   *tabwriter.Writer
	now time.Time
}

func (p describer) line(indent int, format string, args ...any) {
	fmt.Fprintf(p.w, strings.Repeat("  ", indent)+format+"\n", args...)
}

func (p describer) kv(indent int, key, value string) {
	p.line(indent, "%s:\t%s", key, value)
}

func (p describer) table(indent int, head []string, rows [][]string) {
	_ = p.w.Flush()
	defer func() { _ = p.w.Flush() }()
	row(p.w, strings.Repeat("  ", indent)+strings.Join(head, "\t"))
	dashes := make([]string, len(head))
	for i, h := range head {
		dashes[i] = strings.Repeat("-", len(h))
	}
	row(p.w, strings.Repeat("  ", indent)+strings.Join(dashes, "\t"))
	for _, r := range rows {
		row(p.w, strings.Repeat("  ", indent)+strings.Join(r, "\t"))
	}
}

// when is "5m ago (RFC 3339 time)", or <none>.
func (p describer) when(t *metav1.Time) string {
	if t == nil || t.IsZero() {
		return none
	}
	return fmt.Sprintf("%s ago (%s)", age(p.now, *t), t.UTC().Format(time.RFC3339))
}

// printDescription writes d as `kubectl describe` would.
func printDescription(w io.Writer, d *hubview.Description, now time.Time) error {
	tw := newTable(w)
	p := describer{w: tw, now: now}
	p.kv(0, "Name", d.Name)
	p.kv(0, "Namespace", d.Namespace)
	p.kv(0, "Queue", orNone(d.Queue))
	runtime := d.RuntimeRef
	if d.PinnedRuntime != "" {
		runtime += " (pinned as " + d.PinnedRuntime + ")"
	}
	p.kv(0, "Runtime", runtime)
	p.kv(0, "Created", p.when(&d.Created))
	p.kv(0, "Phase", d.Phase)
	p.conditions(0, d.Conditions)
	p.progress(d.Progress, d.ProgressHistory, d.Phase)
	p.workload(d.Workload)
	if d.DispatchesHidden {
		p.summary(d.Summary)
	} else {
		p.placement(d.Placement)
	}
	p.attempts(d.Attempts)
	p.events(d.Events)
	return tw.Flush()
}

func (p describer) conditions(indent int, conds []metav1.Condition) {
	if len(conds) == 0 {
		p.kv(indent, "Conditions", none)
		return
	}
	p.line(indent, "Conditions:")
	var rows [][]string
	for _, c := range conds {
		rows = append(rows, []string{c.Type, string(c.Status), orNone(c.Reason), age(p.now, c.LastTransitionTime), orNone(c.Message)})
	}
	p.table(indent+1, []string{"Type", "Status", "Reason", "Age", "Message"}, rows)
}

// progress prints the latest report with its age and metrics, and how much
// history the hub keeps.
func (p describer) progress(ts *trainer.TrainerStatus, h *v1alpha1.ProgressHistory, phase string) {
	p.kv(0, "Progress", hubview.ProgressText(ts, phase, p.now))
	if ts == nil {
		return
	}
	reported := p.when(&ts.LastUpdatedTime)
	if hubview.StaleReport(phase, ts.LastUpdatedTime, p.now) {
		reported += fmt.Sprintf(" (stale: no report for over %s while the job runs)", duration.HumanDuration(hubview.StaleReportAfter))
	}
	p.kv(1, "Last Report", reported)
	if len(ts.Metrics) == 0 {
		p.kv(1, "Metrics", none)
	} else {
		p.line(1, "Metrics:")
		var rows [][]string
		for _, m := range ts.Metrics {
			// One line each, whatever the process sent.
			rows = append(rows, []string{strings.Join(strings.Fields(m.Name), " "), strings.Join(strings.Fields(m.Value), " ")})
		}
		p.table(2, []string{"Name", "Value"}, rows)
	}
	if h != nil && len(h.Points) > 0 {
		p.kv(1, "History", fmt.Sprintf("%d points from %s, at least %ds apart (the dashboard draws them)",
			len(h.Points), p.when(&h.Points[0].Time), h.StepSeconds))
	}
}

func (p describer) workload(wl *hubview.WorkloadInfo) {
	if wl == nil {
		p.kv(0, "Workload", none+" (Kueue has not made one: is the queue label set and the LocalQueue there?)")
		return
	}
	p.kv(0, "Workload", wl.Name)
	p.kv(1, "Cluster Queue", orNone(wl.ClusterQueue))
	p.conditions(1, wl.Conditions)
	if len(wl.PodSets) > 0 {
		p.line(1, "Admission:")
		var rows [][]string
		for _, ps := range wl.PodSets {
			count := "?"
			if ps.Count != nil {
				count = strconv.Itoa(int(*ps.Count))
			}
			rows = append(rows, []string{string(ps.Name), count, flavorList(ps.Flavors)})
		}
		p.table(2, []string{"Pod Set", "Count", "Flavors"}, rows)
	}
	if len(wl.Checks) == 0 {
		p.kv(1, "Admission Checks", none)
		return
	}
	p.line(1, "Admission Checks:")
	var rows [][]string
	for _, c := range wl.Checks {
		name := c.Name
		if c.Trainyard {
			name += " (trainyard)"
		}
		rows = append(rows, []string{name, string(c.State), age(p.now, c.LastTransitionTime), orNone(c.Message)})
	}
	p.table(2, []string{"Name", "State", "Age", "Message"}, rows)
}

func (p describer) placement(pl *hubview.Placement) {
	if pl == nil {
		p.kv(0, "Placement", none+" (no live Dispatch)")
		return
	}
	p.line(0, "Placement:")
	p.kv(1, "Target", pl.Target)
	p.kv(1, "Attempt", strconv.Itoa(int(pl.Attempt)))
	p.kv(1, "Dispatch", pl.Dispatch)
	phase := pl.Phase
	if pl.Reason != "" {
		phase += " (" + pl.Reason + ")"
	}
	p.kv(1, "Phase", phase)
	if pl.Message != "" {
		p.kv(1, "Message", pl.Message)
	}
	p.outcome(pl.Remote.String(), pl.ExitCode, pl.StartTime, pl.CompletionTime)
	p.line(1, "Runtime Snapshot:")
	p.kv(2, "Kind", string(pl.Runtime.Kind))
	p.kv(2, "Name", pl.Runtime.Name)
	p.kv(2, "Hash", pl.Runtime.Hash)
	p.line(1, "Pod Sets:")
	var rows [][]string
	for _, ps := range pl.PodSets {
		rows = append(rows, []string{ps.Name, strconv.Itoa(int(ps.Count)), flavorList(ps.Flavors), topology(ps.Topology)})
	}
	p.table(2, []string{"Name", "Count", "Flavors", "Topology"}, rows)
}

// outcome prints the remote work, its exit code and times.
func (p describer) outcome(remote string, exitCode *int32, started, completed *metav1.Time) {
	p.kv(1, "Remote", orNone(remote))
	exit := none
	if exitCode != nil {
		exit = strconv.Itoa(int(*exitCode))
	}
	p.kv(1, "Exit Code", exit)
	p.kv(1, "Started", p.when(started))
	p.kv(1, "Completed", p.when(completed))
}

// summaryNote says why a tenant sees the summary only.
const summaryNote = "hub summary; full Dispatch detail is for administrators"

func (p describer) summary(s *v1alpha1.PlacementSummary) {
	if s == nil {
		p.kv(0, "Placement", none+" (no summary on the TrainJob yet; "+summaryNote+")")
		return
	}
	p.line(0, "Placement ("+summaryNote+"):")
	p.kv(1, "Target", s.Target)
	p.kv(1, "Attempt", strconv.Itoa(int(s.Attempt)))
	phase := string(s.Phase)
	if s.Reason != "" {
		phase += " (" + s.Reason + ")"
	}
	p.kv(1, "Phase", phase)
	p.outcome(s.Remote, s.Exit, s.Started, s.Ended)
	p.line(1, "Pod Sets:")
	var rows [][]string
	for _, ps := range s.PodSets {
		where := "anywhere on the target"
		if len(ps.Domains) > 0 {
			where = strings.Join(ps.Domains, ", ")
			if ps.MoreDomains > 0 {
				where += fmt.Sprintf(" and %d more", ps.MoreDomains)
			}
		}
		rows = append(rows, []string{ps.Name, strconv.Itoa(int(ps.Count)), where})
	}
	p.table(2, []string{"Name", "Count", "Domains"}, rows)
}

func (p describer) attempts(as []hubview.AttemptInfo) {
	if len(as) == 0 {
		return
	}
	p.line(0, "Attempts:")
	var rows [][]string
	for _, a := range as {
		state := ""
		switch {
		case a.Live:
			state = "live"
		case a.Deleting:
			state = "deleting"
		}
		rows = append(rows, []string{strconv.Itoa(int(a.Attempt)), a.Target, orNone(a.Phase), a.Dispatch, orNone(state)})
	}
	p.table(1, []string{"Attempt", "Target", "Phase", "Dispatch", "State"}, rows)
}

func (p describer) events(evs []hubview.EventInfo) {
	if len(evs) == 0 {
		p.kv(0, "Events", none)
		return
	}
	p.line(0, "Events:")
	var rows [][]string
	for _, e := range evs {
		a := age(p.now, e.Last)
		if e.Count > 1 {
			a = fmt.Sprintf("%s (x%d)", a, e.Count)
		}
		rows = append(rows, []string{e.Type, e.Reason, a, orNone(e.From), e.Object, strings.TrimSpace(e.Message)})
	}
	p.table(1, []string{"Type", "Reason", "Age", "From", "Object", "Message"}, rows)
}

// flavorList prints flavors by resource, sorted: "nvidia.com/gpu=h100".
func flavorList[V ~string, K ~string](flavors map[K]V) string {
	keys := slices.Sorted(maps.Keys(flavors))
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%s", k, flavors[k]))
	}
	return orNone(strings.Join(parts, ","))
}

// topology prints a placement's domains with their pod counts:
// "rack: r1=2, r2=1".
func topology(t *v1alpha1.TopologyAssignment) string {
	if t == nil || len(t.Domains) == 0 {
		return "anywhere on the target"
	}
	parts := make([]string, 0, len(t.Domains))
	for _, d := range t.Domains {
		parts = append(parts, fmt.Sprintf("%s=%d", strings.Join(d.Values, "/"), d.Count))
	}
	return strings.Join(t.Levels, "/") + ": " + strings.Join(parts, ", ")
}

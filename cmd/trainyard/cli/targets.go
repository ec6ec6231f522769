package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/hubview"
)

// maxDomainsShown bounds the domains -o wide lists per target; -o yaml
// shows them all.
const maxDomainsShown = 8

func newTargetsCommand(e *env) *cobra.Command {
	var (
		f   hubFlags
		out string
	)
	formats := []string{outputWide, outputYAML, outputJSON, outputName}
	cmd := &cobra.Command{
		Use:     "targets [NAME...]",
		Aliases: []string{"target"},
		Short:   "List the targets (Kubernetes spokes, Slurm clusters) with their health and free GPUs",
		Long: `List the Targets the hub dispatches to: whether each is Available (and why
not), how long ago its agent last reported, and its free and total GPUs.
-o wide adds the flavors it serves, whether it is paused, and the free GPUs of
each node per topology domain.`,
		Example: e.examples("targets", "targets -o wide", "targets spoke-1 -o yaml"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(out, formats...); err != nil {
				return err
			}
			h, err := f.connect()
			if err != nil {
				return err
			}
			targets, err := getTargets(cmd, h, args)
			if err != nil {
				return hubview.Explain(err)
			}
			return printTargets(e.Out, out, targets, len(args) == 1, e.clock.Now())
		},
	}
	// Targets are cluster-scoped: -n and -A are accepted, as kubectl does
	// for nodes, and ignored.
	f.addTo(cmd, true, true)
	for _, name := range []string{"namespace", "all-namespaces"} {
		cmd.Flags().Lookup(name).Usage = "ignored: targets are cluster-scoped"
	}
	addOutputFlag(cmd, &out, formats...)
	return cmd
}

// getTargets lists all Targets, or gets the named ones.
func getTargets(cmd *cobra.Command, h *hubview.Hub, names []string) ([]v1alpha1.Target, error) {
	if len(names) == 0 {
		var l v1alpha1.TargetList
		if err := h.List(cmd.Context(), &l); err != nil {
			return nil, err
		}
		return l.Items, nil
	}
	var out []v1alpha1.Target
	for _, n := range names {
		var t v1alpha1.Target
		if err := h.Get(cmd.Context(), client.ObjectKey{Name: n}, &t); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// printTargets writes targets in the chosen format.
func printTargets(w io.Writer, format string, targets []v1alpha1.Target, single bool, now time.Time) error {
	switch format {
	case outputYAML, outputJSON:
		for i := range targets {
			targets[i].APIVersion, targets[i].Kind = v1alpha1.GroupVersion.String(), "Target"
			targets[i].ManagedFields = nil
		}
		return printItems(w, format, targets, single)
	case outputName:
		for _, t := range targets {
			fmt.Fprintf(w, "target.%s/%s\n", v1alpha1.GroupVersion.Group, t.Name)
		}
		return nil
	}
	if len(targets) == 0 {
		_, err := fmt.Fprintln(w, "No targets found.")
		return err
	}
	wide := format == outputWide
	tw := newTable(w)
	head := []string{"NAME", "TYPE", "AVAILABLE", "HEARTBEAT", "FREE-GPUS", "AGE"}
	if wide {
		head = append(head, "FLAVORS", "PAUSED", "FREE-GPUS-PER-DOMAIN")
	}
	row(tw, head...)
	for i := range targets {
		t := &targets[i]
		cells := []string{t.Name, string(t.Spec.Type), availability(t), heartbeat(t, now), gpus(t), age(now, t.CreationTimestamp)}
		if wide {
			cells = append(cells, orNone(strings.Join(t.Spec.Flavors, ",")), strconv.FormatBool(t.Spec.Paused), domains(t))
		}
		row(tw, cells...)
	}
	return tw.Flush()
}

// availability is the Available condition's status with its reason.
func availability(t *v1alpha1.Target) string {
	c := apimeta.FindStatusCondition(t.Status.Conditions, v1alpha1.TargetAvailable)
	if c == nil {
		return "Unknown"
	}
	if c.Reason == "" {
		return string(c.Status)
	}
	return fmt.Sprintf("%s (%s)", c.Status, c.Reason)
}

// heartbeat is the age of the agent's last report.
func heartbeat(t *v1alpha1.Target, now time.Time) string {
	if t.Status.LastHeartbeatTime == nil {
		return "<never>"
	}
	return age(now, *t.Status.LastHeartbeatTime) + " ago"
}

// gpus is free/total GPUs as the last heartbeat reported them.
func gpus(t *v1alpha1.Target) string {
	total, ok := t.Status.Capacity[v1alpha1.GPUResource]
	if !ok {
		if t.Status.LastHeartbeatTime == nil {
			return none
		}
		return fmt.Sprintf("%d/?", t.Status.FreeGPUs)
	}
	return fmt.Sprintf("%d/%s", t.Status.FreeGPUs, total.String())
}

// domains lists each topology domain's free GPUs per node, as
// "rack-a=8,8,4" (values above the node level joined by "/").
func domains(t *v1alpha1.Target) string {
	if t.Status.Topology == nil || len(t.Status.Topology.Domains) == 0 {
		return none
	}
	all := t.Status.Topology.Domains
	var parts []string
	for _, d := range all[:min(len(all), maxDomainsShown)] {
		free := make([]string, len(d.FreeGPUsPerNode))
		for i, n := range d.FreeGPUsPerNode {
			free[i] = strconv.Itoa(int(n))
		}
		p := strings.Join(free, ",")
		if len(d.Values) > 0 {
			p = strings.Join(d.Values, "/") + "=" + p
		}
		parts = append(parts, p)
	}
	if len(all) > maxDomainsShown {
		parts = append(parts, fmt.Sprintf("(+%d more)", len(all)-maxDomainsShown))
	}
	return strings.Join(parts, " ")
}

package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox"
)

// watchDispatches shows the hub's Dispatches until ctx ends: on a terminal
// one table redrawn in place, otherwise one line per change.
func watchDispatches(ctx context.Context, sb *sandbox.Sandbox, out *devOutput) {
	tty := isTerminal(out.w)
	if tty {
		out.line("press Ctrl-C to stop everything")
	} else {
		out.line("stop with Ctrl-C, SIGTERM or `dev down`; one line per Dispatch change follows")
	}
	live := &liveTable{out: out}
	seen := map[string]string{}
	for {
		if readerGone(out.w) {
			out.lost()
		}
		if items, err := sb.Dispatches(ctx); err == nil {
			if tty {
				live.draw(dispatchTable(items), terminalWidth(out.w))
			} else {
				for _, l := range dispatchChanges(seen, items, time.Now()) {
					out.line(l)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// liveTable redraws its lines in place: the cursor goes back up over the
// previous drawing, which is cleared, before the new one is written.
type liveTable struct {
	out   *devOutput
	last  string
	drawn int
}

func (t *liveTable) draw(lines []string, width int) {
	text := strings.Join(lines, "\n")
	if text == t.last {
		return
	}
	t.last = text
	var b strings.Builder
	if t.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dA\r\x1b[J", t.drawn)
	}
	for _, l := range lines {
		// A wrapped line would take two rows and the next redraw would
		// go back up too few.
		if width > 1 && len(l) >= width {
			l = l[:width-1]
		}
		b.WriteString(l + "\n")
	}
	t.drawn = len(lines)
	t.out.write(b.String())
}

type dispatchRow struct {
	key, trainJob, target, phase, remote string
	attempt                              int32
}

func dispatchRows(items []v1alpha1.Dispatch) []dispatchRow {
	rows := make([]dispatchRow, 0, len(items))
	for _, d := range items {
		remote := ""
		if r := d.Status.Remote; r != nil {
			remote = r.Kind + " " + r.Name
			switch {
			case r.Namespace != "":
				remote = r.Kind + " " + r.Namespace + "/" + r.Name
			case r.ID != "":
				remote += " (id " + r.ID + ")"
			}
		}
		phase := string(d.Status.Phase)
		if phase == "" {
			phase = "-"
		}
		tj := d.Spec.Workload.Namespace + "/" + d.Spec.TrainJob.Name
		rows = append(rows, dispatchRow{key: d.Namespace + "/" + d.Name, trainJob: tj, target: d.Spec.TargetName,
			attempt: d.Spec.Attempt, phase: phase, remote: remote})
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].trainJob != rows[j].trainJob {
			return rows[i].trainJob < rows[j].trainJob
		}
		return rows[i].attempt < rows[j].attempt
	})
	return rows
}

// dispatchTable is the live table: a summary by phase, then one row per
// Dispatch.
func dispatchTable(items []v1alpha1.Dispatch) []string {
	rows := dispatchRows(items)
	phases := map[string]int{}
	for _, r := range rows {
		phases[r.phase]++
	}
	var counts []string
	for p, n := range phases {
		counts = append(counts, fmt.Sprintf("%d %s", n, p))
	}
	sort.Strings(counts)
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %d dispatches: %s\n", time.Now().Format("15:04:05"), len(rows), strings.Join(counts, ", "))
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TRAINJOB\tTARGET\tATTEMPT\tPHASE\tREMOTE")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", r.trainJob, r.target, r.attempt, r.phase, r.remote)
	}
	_ = w.Flush()
	return strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
}

// dispatchChanges returns one line per Dispatch that is new, changed or
// gone since seen, and updates seen.
func dispatchChanges(seen map[string]string, items []v1alpha1.Dispatch, now time.Time) []string {
	var lines []string
	stamp := now.Format("15:04:05")
	current := map[string]bool{}
	for _, r := range dispatchRows(items) {
		current[r.key] = true
		state := fmt.Sprintf("%s  target %s  attempt %d  %s", r.trainJob, r.target, r.attempt, r.phase)
		if r.remote != "" {
			state += "  " + r.remote
		}
		if seen[r.key] != state {
			seen[r.key] = state
			lines = append(lines, stamp+"  "+state)
		}
	}
	var gone []string
	for k, state := range seen {
		if !current[k] {
			gone = append(gone, stamp+"  "+state+"  (deleted)")
			delete(seen, k)
		}
	}
	sort.Strings(gone)
	return append(lines, gone...)
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func terminalWidth(f *os.File) int {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}

// readerGone reports whether f is a pipe whose reader has closed it, so
// that a sandbox whose output nobody reads any more stops even while it
// has nothing to write.
func readerGone(f *os.File) bool {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return false
	}
	fds := []unix.PollFd{{Fd: int32(f.Fd())}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0 && fds[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0
}

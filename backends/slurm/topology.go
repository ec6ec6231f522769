package slurm

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Topology levels a Slurm target publishes. The node level is the same
// label Kubernetes spokes use, so a request for one node means the same
// thing everywhere.
const (
	HostnameLevel = corev1.LabelHostname
	// SwitchLevel is a leaf switch of topology/tree: the nodes cabled to it.
	SwitchLevel = "slurm.trainyard.dev/switch"
	// BlockLevel is a base block of topology/block.
	BlockLevel = "slurm.trainyard.dev/block"
)

// UpperSwitchLevel is the tree level n switches above the leaf switches.
func UpperSwitchLevel(n int) string { return fmt.Sprintf("%s-level-%d", SwitchLevel, n) }

// Topology maps each node to its domains, widest first, at Levels.
type Topology struct {
	// Levels above the node level, widest first.
	Levels []string
	// Path of each node: one value per level.
	Path map[string][]string
}

// ParseTopology reads a topology.conf (or `scontrol show topology` output,
// which has the same key=value shape) for topology/tree or topology/block.
func ParseTopology(r io.Reader) (*Topology, error) {
	type sw struct {
		nodes, children []string
	}
	switches := map[string]*sw{}
	var order []string
	blocks := map[string][]string{}
	var blockOrder []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		fields := map[string]string{}
		for _, f := range strings.Fields(text) {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				return nil, fmt.Errorf("topology line %d: %q is not key=value", line, f)
			}
			fields[strings.ToLower(k)] = v
		}
		switch {
		case len(fields) == 0:
		case fields["switchname"] != "":
			name := fields["switchname"]
			s := &sw{}
			var err error
			if v := fields["nodes"]; v != "" {
				if s.nodes, err = ExpandHostlist(v); err != nil {
					return nil, fmt.Errorf("topology line %d: %w", line, err)
				}
			}
			if v := fields["switches"]; v != "" {
				if s.children, err = ExpandHostlist(v); err != nil {
					return nil, fmt.Errorf("topology line %d: %w", line, err)
				}
			}
			if _, dup := switches[name]; !dup {
				order = append(order, name)
			}
			switches[name] = s
		case fields["blockname"] != "":
			nodes, err := ExpandHostlist(fields["nodes"])
			if err != nil {
				return nil, fmt.Errorf("topology line %d: %w", line, err)
			}
			if _, dup := blocks[fields["blockname"]]; !dup {
				blockOrder = append(blockOrder, fields["blockname"])
			}
			blocks[fields["blockname"]] = nodes
		case fields["blocksizes"] != "":
		default:
			return nil, fmt.Errorf("topology line %d: neither SwitchName nor BlockName", line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	t := &Topology{Path: map[string][]string{}}
	if len(blocks) > 0 {
		if len(switches) > 0 {
			return nil, fmt.Errorf("topology mixes switches and blocks")
		}
		t.Levels = []string{BlockLevel}
		for _, b := range blockOrder {
			for _, n := range blocks[b] {
				t.Path[n] = []string{b}
			}
		}
		return t, nil
	}
	if len(switches) == 0 {
		return t, nil
	}
	parent := map[string]string{}
	for _, name := range order {
		for _, c := range switches[name].children {
			if _, ok := switches[c]; !ok {
				return nil, fmt.Errorf("switch %s lists unknown switch %s", name, c)
			}
			parent[c] = name
		}
	}
	depth := 0
	paths := map[string][]string{}
	for _, name := range order {
		for _, n := range switches[name].nodes {
			// Walk up from the leaf switch; a cycle would never end.
			path := []string{name}
			for p, ok := parent[name]; ok; p, ok = parent[p] {
				if len(path) > len(switches) {
					return nil, fmt.Errorf("switch %s: cycle in the switch tree", name)
				}
				path = append(path, p)
			}
			// Widest first.
			for i, j := 0, len(path)-1; i < j; i, j = i+1, j-1 {
				path[i], path[j] = path[j], path[i]
			}
			paths[n] = path
			depth = max(depth, len(path))
		}
	}
	for i := depth - 1; i >= 1; i-- {
		t.Levels = append(t.Levels, UpperSwitchLevel(i))
	}
	t.Levels = append(t.Levels, SwitchLevel)
	for n, p := range paths {
		// A shallower branch repeats its top switch at the missing levels.
		for len(p) < depth {
			p = append([]string{p[0]}, p...)
		}
		t.Path[n] = p
	}
	return t, nil
}

// ExpandHostlist expands a Slurm hostlist such as "n[1-3,7],gpu[01-02]x".
func ExpandHostlist(expr string) ([]string, error) {
	var out []string
	for _, item := range splitTopLevel(expr) {
		if item == "" {
			continue
		}
		names, err := expandOne(item)
		if err != nil {
			return nil, err
		}
		out = append(out, names...)
	}
	return out, nil
}

// splitTopLevel splits on commas outside brackets.
func splitTopLevel(s string) []string {
	var parts []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, s[start:])
}

// maxHostlist bounds one expression, so a typo cannot allocate millions.
const maxHostlist = 1 << 20

func expandOne(item string) ([]string, error) {
	open := strings.IndexByte(item, '[')
	if open < 0 {
		if strings.ContainsRune(item, ']') {
			return nil, fmt.Errorf("hostlist %q: unbalanced ]", item)
		}
		return []string{item}, nil
	}
	closeAt := strings.IndexByte(item[open:], ']')
	if closeAt < 0 {
		return nil, fmt.Errorf("hostlist %q: unbalanced [", item)
	}
	closeAt += open
	prefix, ranges, rest := item[:open], item[open+1:closeAt], item[closeAt+1:]
	tails, err := expandOne(rest)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range strings.Split(ranges, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || a > b || a < 0 {
			return nil, fmt.Errorf("hostlist %q: bad range %q", item, r)
		}
		if len(out)+(b-a+1)*len(tails) > maxHostlist {
			return nil, fmt.Errorf("hostlist %q: more than %d names", item, maxHostlist)
		}
		width := len(lo)
		for i := a; i <= b; i++ {
			num := strconv.Itoa(i)
			for len(num) < width {
				num = "0" + num
			}
			for _, t := range tails {
				out = append(out, prefix+num+t)
			}
		}
	}
	return out, nil
}

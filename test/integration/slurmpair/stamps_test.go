package slurmpair

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// checkpointFor is how long a copy's trap works after SIGTERM before it
// exits, as a checkpoint would: within the harness clusters' KillWait (5 s,
// hack/slurm/configure.sh), after which slurmstepd kills it.
const checkpointFor = 3 * time.Second

// stampScript is a job (bash -c) that stamps its lifetime into file, a
// path inside the chroots that every cluster shares (sharedFile):
//
//	start <cluster>/<job id> <epoch ns>   first thing it does
//	term <cluster>/<job id> <epoch ns>    SIGTERM came; it checkpoints
//	end <cluster>/<job id> <epoch ns> SIGTERM|exit
//
// The first copy runs long; a copy that finds an earlier copy's start
// stamp resumes from its checkpoint and runs for a few seconds. The trap
// ignores further SIGTERMs (srun forwards its own) while it checkpoints.
func stampScript(file string) string {
	return `f=` + strconv.Quote(file) + `
me="${SLURM_CLUSTER_NAME:?}/${SLURM_JOB_ID:?}"
echo "start $me $(date +%s%N)" >> "$f"
trap 'trap "" TERM; echo "term $me $(date +%s%N)" >> "$f"; kill "$!" 2>/dev/null; sleep ` +
		strconv.Itoa(int(checkpointFor.Seconds())) + `; echo "end $me $(date +%s%N) SIGTERM" >> "$f"; exit 143' TERM
run=300
if (( $(grep -c "^start " "$f") > 1 )); then run=5; fi
sleep "$run" & wait "$!"
echo "end $me $(date +%s%N) exit" >> "$f"
`
}

// sharedFile makes file (a path inside the chroots) one file that owner
// (uid and gid) owns on every cluster: the clusters' chroots are clones on
// one filesystem, so it is created in the first and hard-linked into the
// others, as a filesystem the clusters mount in common. It returns the
// host path the test reads.
func sharedFile(t *testing.T, file string, owner int) string {
	t.Helper()
	first := env.sites[0].cluster.Path(file)
	if err := os.WriteFile(first, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(first) })
	if err := os.Chown(first, owner, owner); err != nil {
		t.Fatal(err)
	}
	for _, s := range env.sites[1:] {
		p := s.cluster.Path(file)
		_ = os.Remove(p)
		if err := os.Link(first, p); err != nil {
			t.Fatalf("share %s between the clusters' chroots (%s and %s must be on one filesystem): %v",
				file, filepath.Dir(first), filepath.Dir(p), err)
		}
		t.Cleanup(func() { _ = os.Remove(p) })
	}
	return first
}

// lifetime is one copy's life as its stamps tell it.
type lifetime struct {
	ID         string
	Start, End time.Time
	// Term is when SIGTERM came (zero if it never did); How is "exit" or
	// "SIGTERM" ("" while it has not ended).
	Term time.Time
	How  string
}

func (l lifetime) String() string {
	s := l.ID + " [" + l.Start.Format(time.StampMicro) + ", "
	if l.How == "" {
		return s + "running)"
	}
	return s + l.End.Format(time.StampMicro) + "] " + l.How
}

// overlaps: both lived at one instant (a copy that has not ended lives on).
func (l lifetime) overlaps(o lifetime) bool {
	return !l.end().Before(o.Start) && !o.end().Before(l.Start)
}

func (l lifetime) end() time.Time {
	if l.How == "" {
		return time.Unix(1<<62, 0)
	}
	return l.End
}

// lifetimes reads the stamps in path, one lifetime per copy in order of
// start.
func lifetimes(g Gomega, path string) []lifetime {
	data, err := os.ReadFile(path)
	g.Expect(err).NotTo(HaveOccurred())
	byID := map[string]*lifetime{}
	var order []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		g.Expect(len(f)).To(BeNumerically(">=", 3), "stamp %q", line)
		ns, err := strconv.ParseInt(f[2], 10, 64)
		g.Expect(err).NotTo(HaveOccurred(), "stamp %q", line)
		at := time.Unix(0, ns)
		l := byID[f[1]]
		if l == nil {
			g.Expect(f[0]).To(Equal("start"), "first stamp of %s", f[1])
			l = &lifetime{ID: f[1]}
			byID[f[1]], order = l, append(order, f[1])
		}
		switch f[0] {
		case "start":
			l.Start = at
		case "term":
			l.Term = at
		case "end":
			g.Expect(f).To(HaveLen(4), "stamp %q", line)
			l.End, l.How = at, f[3]
		default:
			g.Expect(f[0]).To(BeElementOf("start", "term", "end"), "stamp %q", line)
		}
	}
	out := make([]lifetime, 0, len(order))
	for _, id := range order {
		out = append(out, *byID[id])
	}
	slices.SortFunc(out, func(a, b lifetime) int { return a.Start.Compare(b.Start) })
	return out
}

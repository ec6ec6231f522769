package slurm

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
)

// RemoteKind is the RemoteRef kind of a Slurm job.
const RemoteKind = "SlurmJob"

// DefaultSubmitSettle is how long after an uncertain submit a job list
// must begin before it can prove the job absent: slurmrestd passes a
// submit on to slurmctld even after its client gave up, within slurmctld's
// MessageTimeout (10 s by default).
const DefaultSubmitSettle = 10 * time.Second

// Backend runs Dispatches as Slurm batch jobs through slurmrestd.
type Backend struct {
	Client *Client
	// Target returns the current Target, whose spec holds the partition and
	// account mappings (an administrator may edit them at any time).
	Target func(ctx context.Context) (*v1alpha1.Target, error)
	// Topology returns the cluster's topology; nil means nodes only.
	Topology func() (*Topology, error)
	// OutputRoot is where the agent sees the cluster's filesystem, to read
	// job output for `trainyard logs` ("/" on a login node, a mount
	// elsewhere); empty turns logs off.
	OutputRoot string
	// JobEnv, when set, adds agent-made environment to each job: where its
	// processes report progress and with which credential. It is not part
	// of Render, which the hub also runs, since only the agent holds it.
	JobEnv func(d *v1alpha1.Dispatch) []string
	// SubmitSettle overrides DefaultSubmitSettle.
	SubmitSettle time.Duration
	// Clock defaults to the real clock.
	Clock clock.PassiveClock

	mu sync.Mutex
	// created is when this backend was made: a job list taken after it
	// holds every job an earlier incarnation of the agent submitted.
	created time.Time
	// listed is the last job list (ListJobs), every job id by comment, and
	// when it was taken (or last proven current).
	listed   map[string][]int32
	listedAt time.Time
	// view is that list itself, by job id, and slurmctld's time of it,
	// from which the next list asks only for changes (view.go).
	view       map[int32]*JobInfo
	viewJobs   []JobInfo
	lastUpdate int64
	// submitted records this process's submits by comment, since the last
	// list may predate them, and when each was made. An entry goes once the
	// agent has recorded the job on its Dispatch and a list taken after the
	// submit holds it (Observe), or the job is cancelled or deleted (see
	// forgetSubmits): the maps hold only jobs of Dispatches in flight.
	submitted   map[string]int32
	submittedAt map[string]time.Time
	// uncertain records, by comment, when a submit ended without saying
	// whether it made the job: only a list begun SubmitSettle after that
	// may prove the job absent. A list that has done so drops it.
	uncertain map[string]time.Time
	// workDirs is what this process knows of its users' work directories,
	// by path: one entry per mapped user (workdir.go).
	workDirs map[string]workDirState

	// killWait is the Target's spec.slurm.killWaitSeconds at its last read
	// (nil: none read yet), for StopWithin, which must not call the hub.
	killWait atomic.Pointer[int32]
}

// NewBackend returns a Backend for the target target returns.
func NewBackend(c *Client, target func(context.Context) (*v1alpha1.Target, error)) *Backend {
	return &Backend{Client: c, Target: target, created: time.Now(), submitted: map[string]int32{}, submittedAt: map[string]time.Time{},
		uncertain: map[string]time.Time{}}
}

// target reads the current Target and keeps what StopWithin needs of it.
func (b *Backend) target(ctx context.Context) (*v1alpha1.Target, error) {
	t, err := b.Target(ctx)
	if err != nil {
		return nil, err
	}
	kw := t.Spec.Slurm.KillWait()
	b.killWait.Store(&kw)
	return t, nil
}

// StopWithin bounds how long a job's processes live on after Cancel or
// Delete: the cluster's KillWait (the Target's, as last read; Slurm's
// default before any read) and backends.StopMargin. The agent reads its
// Target on every submit, list and capacity report, so a change reaches
// it within a heartbeat.
func (b *Backend) StopWithin() time.Duration {
	kw := v1alpha1.DefaultSlurmKillWaitSeconds
	if p := b.killWait.Load(); p != nil {
		kw = *p
	}
	return time.Duration(kw)*time.Second + backends.StopMargin
}

func (b *Backend) now() time.Time {
	if b.Clock == nil {
		return time.Now()
	}
	return b.Clock.Now()
}

func (b *Backend) settle() time.Duration {
	if b.SubmitSettle > 0 {
		return b.SubmitSettle
	}
	return DefaultSubmitSettle
}

// errSettling: no job list yet proves whether the job exists, typically
// because an uncertain submit is too recent for any list to show its job.
var errSettling = errors.New("an earlier submit may still reach slurmctld; looking for its job once it has settled")

// jobsOf returns the ids of every job with comment, from a list that is
// known to hold them all: taken after this backend was made (so it holds
// every job of an earlier agent) and, after an uncertain submit, begun
// SubmitSettle after it; this process's own submits are added. It lists
// afresh when the kept list is not such a list.
func (b *Backend) jobsOf(ctx context.Context, comment string) ([]int32, error) {
	ids, ok, wait := b.known(comment)
	if ok {
		return ids, nil
	}
	if wait > 0 {
		return nil, fmt.Errorf("%w (%s)", errSettling, wait.Round(time.Second))
	}
	if _, err := b.ListJobs(ctx); err != nil {
		return nil, err
	}
	if ids, ok, _ = b.known(comment); !ok {
		return nil, errSettling
	}
	return ids, nil
}

// known answers jobsOf from the kept list when it proves enough; else it
// says how long to wait before a new list could.
func (b *Backend) known(comment string) (ids []int32, ok bool, wait time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	from := b.created
	unc, isUncertain := b.uncertain[comment]
	if isUncertain {
		from = unc.Add(b.settle())
		if now := b.now(); now.Before(from) {
			return nil, false, from.Sub(now)
		}
	}
	if b.created.IsZero() || !b.listedAt.After(from) {
		return nil, false, 0
	}
	delete(b.uncertain, comment)
	ids = append(ids, b.listed[comment]...)
	if id := b.submitted[comment]; id != 0 && !slices.Contains(ids, id) {
		ids = append(ids, id)
	}
	return ids, true, 0
}

// existing returns the id of the newest job submitted for comment, 0 if
// none (see jobsOf).
func (b *Backend) existing(ctx context.Context, comment string) (int32, error) {
	b.mu.Lock()
	id := b.submitted[comment]
	b.mu.Unlock()
	if id != 0 {
		return id, nil
	}
	ids, err := b.jobsOf(ctx, comment)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	return slices.Max(ids), nil
}

var _ backends.Backend = (*Backend)(nil)
var _ backends.RemoteLister = (*Backend)(nil)
var _ backends.StopBound = (*Backend)(nil)

// Submit submits the job of d unless a job with its comment exists.
func (b *Backend) Submit(ctx context.Context, d *v1alpha1.Dispatch) (*v1alpha1.RemoteRef, error) {
	t, err := b.target(ctx)
	if err != nil {
		return nil, err
	}
	job, err := Render(d, t)
	if err != nil {
		return nil, err
	}
	// Look up before submitting: a crash after a submit and before the
	// status write, or a submit that timed out after slurmctld took the
	// job, must find that job, not make a second one. The agent
	// works on one Dispatch in one worker at a time, and leader election
	// keeps it to one agent, so no other submit of d can race this one.
	id, err := b.existing(ctx, job.Comment)
	if err != nil {
		return nil, err
	}
	if id != 0 {
		return ref(id, job.Name), nil
	}
	if err := b.prepareWorkDir(ctx, job); err != nil {
		return nil, err
	}
	if b.JobEnv != nil {
		job.Env = append(job.Env, b.JobEnv(d)...)
	}
	id, err = b.Client.Submit(ctx, job)
	if errors.Is(err, ErrSubmitUncertain) {
		// The job may exist: the next submit first proves it absent.
		b.mu.Lock()
		if b.uncertain == nil {
			b.uncertain = map[string]time.Time{}
		}
		b.uncertain[job.Comment] = b.now()
		b.mu.Unlock()
		return nil, err
	}
	var he *HTTPError
	if errors.As(err, &he) && he.Permanent {
		return nil, fmt.Errorf("%w: %w", backends.ErrRejected, err)
	}
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	if b.submitted == nil {
		b.submitted = map[string]int32{}
	}
	if b.submittedAt == nil {
		b.submittedAt = map[string]time.Time{}
	}
	// The job surely exists only once slurmctld answered: a list begun
	// before that may miss it without proving it gone (viewed).
	b.submitted[job.Comment], b.submittedAt[job.Comment] = id, b.now()
	b.mu.Unlock()
	return ref(id, job.Name), nil
}

func ref(id int32, name string) *v1alpha1.RemoteRef {
	return &v1alpha1.RemoteRef{Kind: RemoteKind, Name: name, ID: strconv.Itoa(int(id))}
}

// find returns the job of d: by id when known, else the newest job with
// its comment. The comment is checked either way, since a slurmctld that
// restarted without its state may reuse ids.
func (b *Backend) find(ctx context.Context, d *v1alpha1.Dispatch, id int32) (*JobInfo, error) {
	want := Comment(d)
	if id <= 0 {
		var err error
		if id, err = b.existing(ctx, want); err != nil {
			return nil, err
		}
		if id == 0 {
			return nil, ErrJobNotFound
		}
	}
	j, err := b.Client.Job(ctx, id)
	if err != nil {
		return nil, err
	}
	if j.Comment != want {
		return nil, ErrJobNotFound
	}
	return j, nil
}

func remoteID(d *v1alpha1.Dispatch) int32 {
	if d.Status.Remote == nil || d.Status.Remote.Kind != RemoteKind {
		return 0
	}
	id, err := strconv.ParseInt(d.Status.Remote.ID, 10, 32)
	if err != nil {
		return 0
	}
	return int32(id)
}

// Observe reports the job's state: from the poller's last job list when
// it settles the question (view.go), else by reading the job, and from
// accounting once slurmctld has forgotten the job (see accounted).
func (b *Backend) Observe(ctx context.Context, d *v1alpha1.Dispatch) (*backends.Status, error) {
	b.recorded(d)
	j, err := b.viewed(d)
	if errors.Is(err, errNotInView) {
		j, err = b.find(ctx, d, remoteID(d))
	}
	if errors.Is(err, ErrJobNotFound) {
		j, err = b.accounted(ctx, d)
	}
	if errors.Is(err, ErrJobNotFound) {
		return nil, fmt.Errorf("%w: %w", backends.ErrNotFound, err)
	}
	if err != nil {
		return nil, err
	}
	st := StatusOf(j)
	if st.Phase == v1alpha1.DispatchFailed && st.ExitCode != nil && *st.ExitCode == ExitImageUnavailable {
		if t, err := b.target(ctx); err == nil && t.Spec.Slurm != nil && t.Spec.Slurm.ContainerRuntime == v1alpha1.ContainerRuntimeOCI {
			st.Reason = v1alpha1.ReasonContainerImage
			st.Message = fmt.Sprintf("Slurm job %d failed: its container image could not be pulled or unpacked on the node (exit code %d; the job's error output says why)", j.JobID, ExitImageUnavailable)
		}
	}
	return st, nil
}

// Cancel cancels every job that carries d's comment, not only the one
// recorded (an older agent may have made two), and reports gone once none
// of them is left.
func (b *Backend) Cancel(ctx context.Context, d *v1alpha1.Dispatch) (bool, error) {
	want := Comment(d)
	ids, err := b.jobsOf(ctx, want)
	if errors.Is(err, errSettling) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if id := remoteID(d); id > 0 && !slices.Contains(ids, id) {
		ids = append(ids, id)
	}
	gone, err := b.cancelAll(ctx, ids, func(j *JobInfo) bool { return j.Comment == want })
	if gone {
		b.forgetSubmits(func(c string) bool { return c == want })
	}
	return gone, err
}

// recorded forgets this process's submit of d's job once nothing needs it:
// d records the job (so the agent never submits for d's attempt again)
// and a list taken after the submit holds the job or proves it gone
// (viewed no longer needs the time of the submit).
func (b *Backend) recorded(d *v1alpha1.Dispatch) {
	id, comment := remoteID(d), Comment(d)
	if id <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.submitted[comment] == id && b.listedAt.After(b.submittedAt[comment]) {
		delete(b.submitted, comment)
		delete(b.submittedAt, comment)
	}
}

// forgetSubmits drops what this process remembers of the submits whose
// comment gone accepts: their jobs are cancelled or deleted.
func (b *Backend) forgetSubmits(gone func(comment string) bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range []map[string]time.Time{b.submittedAt, b.uncertain} {
		maps.DeleteFunc(m, func(c string, _ time.Time) bool { return gone(c) })
	}
	maps.DeleteFunc(b.submitted, func(c string, _ int32) bool { return gone(c) })
}

// cancelAll cancels the jobs of ids that mine accepts and have not ended;
// gone is true when there were none.
func (b *Backend) cancelAll(ctx context.Context, ids []int32, mine func(*JobInfo) bool) (gone bool, err error) {
	gone = true
	for _, id := range ids {
		j, err := b.Client.Job(ctx, id)
		if errors.Is(err, ErrJobNotFound) {
			continue
		}
		if err != nil {
			return false, err
		}
		if !mine(j) || Ended(j) {
			continue
		}
		gone = false
		if err := b.Client.Cancel(ctx, id); err != nil {
			return false, err
		}
	}
	return gone, nil
}

// ListRemote lists the live remote work this target's agent submitted:
// one entry per Dispatch attempt, however many jobs carry its comment (Ref
// names the newest).
func (b *Backend) ListRemote(ctx context.Context) ([]backends.RemoteWork, error) {
	t, err := b.target(ctx)
	if err != nil {
		return nil, err
	}
	jobs, err := b.ListJobs(ctx)
	if err != nil {
		return nil, err
	}
	byComment := map[string]int{}
	var out []backends.RemoteWork
	for i := range jobs {
		j := &jobs[i]
		target, w, ok := ParseComment(j.Comment)
		if !ok || target != t.Name || Ended(j) {
			continue
		}
		w.Ref = *ref(j.JobID, j.Name)
		if k, seen := byComment[j.Comment]; seen {
			if j.JobID > jobID(out[k].Ref) {
				out[k].Ref = w.Ref
			}
			continue
		}
		byComment[j.Comment] = len(out)
		out = append(out, w)
	}
	return out, nil
}

// Delete cancels every live job of the Dispatch attempt w names, found by
// a new list, and the job w.Ref names.
func (b *Backend) Delete(ctx context.Context, w backends.RemoteWork) error {
	t, err := b.target(ctx)
	if err != nil {
		return err
	}
	jobs, err := b.ListJobs(ctx)
	if err != nil {
		return err
	}
	same := func(j *JobInfo) bool {
		target, o, ok := ParseComment(j.Comment)
		return ok && target == t.Name && o.DispatchNamespace == w.DispatchNamespace &&
			o.DispatchName == w.DispatchName && o.Attempt == w.Attempt
	}
	var ids []int32
	if id := jobID(w.Ref); id > 0 {
		ids = append(ids, id)
	}
	for i := range jobs {
		if same(&jobs[i]) && !Ended(&jobs[i]) && !slices.Contains(ids, jobs[i].JobID) {
			ids = append(ids, jobs[i].JobID)
		}
	}
	if _, err = b.cancelAll(ctx, ids, same); err != nil {
		return err
	}
	b.forgetSubmits(func(c string) bool {
		target, o, ok := ParseComment(c)
		return ok && target == t.Name && o.DispatchNamespace == w.DispatchNamespace &&
			o.DispatchName == w.DispatchName && o.Attempt == w.Attempt
	})
	return nil
}

func jobID(r v1alpha1.RemoteRef) int32 {
	id, err := strconv.ParseInt(r.ID, 10, 32)
	if err != nil {
		return 0
	}
	return int32(id)
}

// Capacity reads the nodes of the target's partitions.
func (b *Backend) Capacity(ctx context.Context) (*backends.Capacity, error) {
	t, err := b.target(ctx)
	if err != nil {
		return nil, err
	}
	nodes, err := b.Client.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	var topo *Topology
	if b.Topology != nil {
		if topo, err = b.Topology(); err != nil {
			return nil, fmt.Errorf("read topology: %w", err)
		}
	}
	return CapacityOf(nodes, partitionsOf(t), topo), nil
}

func partitionsOf(t *v1alpha1.Target) map[string]bool {
	out := map[string]bool{}
	if t.Spec.Slurm != nil {
		for _, p := range t.Spec.Slurm.Partitions {
			out[p.Partition] = true
		}
	}
	return out
}

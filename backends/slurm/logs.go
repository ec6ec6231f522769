package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
)

// ErrOutputExpired: the job ended longer ago than its Target keeps output
// (spec.slurm.outputRetentionDays).
var ErrOutputExpired = errors.New("the logs are no longer kept")

// Logs reads the end of a job's output files (stdout, then stderr when it
// has any, headed like tail(1) does for several files) below OutputRoot,
// for spec.slurm.outputRetentionDays after the job ended: from slurmctld's
// record of the job, and once slurmctld has forgotten it (MinJobAge) from
// accounting's (jobOfLogs).
//
// The agent may read more than the job's user can, and the files live in
// a directory the user writes, so a file is read only if it is a regular
// file owned by the job's user and reached without following a symlink:
// a tenant who swaps their output for a link to someone else's file gets
// an error, not the file.
func (b *Backend) Logs(ctx context.Context, d *v1alpha1.Dispatch, o backends.LogOptions) (*backends.Logs, error) {
	if b.OutputRoot == "" {
		return nil, errors.New("this agent reads no Slurm output: start it with --slurm-output-root where the cluster's filesystem is mounted")
	}
	if o.Replica != "" {
		return nil, fmt.Errorf("a Slurm job writes one output for all its tasks; drop --replica %q", o.Replica)
	}
	if d.Status.Remote == nil {
		return nil, fmt.Errorf("%w: dispatch %s has no Slurm job yet", backends.ErrNotFound, d.Name)
	}
	t, err := b.target(ctx)
	if err != nil {
		return nil, err
	}
	days := t.Spec.Slurm.RetentionDays()
	// The agent's own record first: past the retention the answer needs
	// neither slurmctld nor an accounting record slurmdbd may have purged.
	if err := expiry(d.Status.Remote.ID, d.Status.CompletionTime, days, b.now()); err != nil {
		return nil, err
	}
	j, uid, err := b.jobOfLogs(ctx, d)
	if err != nil {
		return nil, err
	}
	if d.Status.CompletionTime == nil && Ended(j) {
		if err := expiry(d.Status.Remote.ID, unixTime(j.EndTime), days, b.now()); err != nil {
			return nil, err
		}
	}
	var parts [][]byte
	var sources []string
	truncated := false
	for i, ext := range []string{"out", "err"} {
		path, err := outputPath(j, ext)
		if err != nil {
			return nil, err
		}
		data, cut, err := readOwnedTail(b.OutputRoot, path, uid, o.LimitBytes)
		if errors.Is(err, os.ErrNotExist) && i == 0 {
			if Ended(j) {
				return nil, fmt.Errorf("%w: slurm job %d left no output (%s is gone; state %s)", backends.ErrNotFound, j.JobID, path, strings.Join(j.JobState, ","))
			}
			return nil, fmt.Errorf("%w: slurm job %d has no output yet (%s; state %s)", backends.ErrNotFound, j.JobID, path, strings.Join(j.JobState, ","))
		}
		if errors.Is(err, os.ErrNotExist) || (i > 0 && len(data) == 0) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("slurm job %d: %w", j.JobID, err)
		}
		data, tailCut := backends.TailOf(data, o.TailLines, 0)
		truncated = truncated || cut || tailCut
		parts, sources = append(parts, data), append(sources, path)
	}
	out := parts[0]
	if len(parts) > 1 {
		out = nil
		for i, p := range parts {
			if i > 0 && (len(out) == 0 || out[len(out)-1] != '\n') {
				out = append(out, '\n')
			}
			out = append(out, fmt.Sprintf("==> %s <==\n", sources[i])...)
			out = append(out, p...)
		}
		out, _ = backends.TailOf(out, 0, o.LimitBytes)
	}
	return &backends.Logs{Source: fmt.Sprintf("slurm job %d: %s", j.JobID, strings.Join(sources, ", ")), Data: out, Truncated: truncated}, nil
}

// jobOfLogs finds d's job for Logs and the user its output files must
// belong to: slurmctld's record while it has one; once slurmctld has
// forgotten the job, accounting's record of the job trainyard submitted
// for d (its recorded id and d's comment), whose user id accounting does
// not keep: the agent recorded it in d's status while slurmctld knew the
// job (status.remote.userID).
func (b *Backend) jobOfLogs(ctx context.Context, d *v1alpha1.Dispatch) (*JobInfo, uint32, error) {
	id := remoteID(d)
	j, err := b.find(ctx, d, id)
	switch {
	case err == nil && j.UserID == nil:
		return nil, 0, fmt.Errorf("slurm job %d reports no user id", j.JobID)
	case err == nil:
		return j, uint32(*j.UserID), nil
	case !errors.Is(err, ErrJobNotFound):
		return nil, 0, err
	case id <= 0:
		return nil, 0, fmt.Errorf("%w: %w", backends.ErrNotFound, err)
	}
	j, err = b.Client.AccountedJob(ctx, id, Comment(d))
	switch {
	case errors.Is(err, ErrNoAccounting):
		return nil, 0, fmt.Errorf("%w: slurmctld no longer knows slurm job %d, and this cluster's slurmrestd serves no accounting (slurmdbd) that would", backends.ErrNotFound, id)
	case errors.Is(err, ErrJobNotFound):
		return nil, 0, fmt.Errorf("%w: neither slurmctld nor accounting knows slurm job %d any more", backends.ErrNotFound, id)
	case err != nil:
		return nil, 0, err
	}
	uid := d.Status.Remote.UserID
	if uid == nil {
		return nil, 0, fmt.Errorf("slurm job %d: slurmctld forgot it before the agent recorded its user, so its output cannot be checked and is not read", id)
	}
	if err := sameOutput(j); err != nil {
		return nil, 0, err
	}
	return j, uint32(*uid), nil
}

// sameOutput checks the paths Slurm reports for j's streams, where it
// reports them, against Render's: the template itself (accounting keeps
// it as the job asked) or outputPath's expansion of it (slurmctld's
// answer). A job that asked for other files is not the one trainyard
// submitted, and no file is read for it.
func sameOutput(j *JobInfo) error {
	for _, s := range []struct{ ext, reported string }{{"out", j.StandardOutput}, {"err", j.StandardError}} {
		want, err := outputPath(j, s.ext)
		if err != nil {
			return err
		}
		if s.reported != "" && s.reported != outputTemplate(s.ext) && s.reported != want {
			return fmt.Errorf("slurm job %d wrote its output to %s, not where trainyard told Slurm to (%s); not reading it", j.JobID, s.reported, want)
		}
	}
	return nil
}

// outputTemplate is the path Render gives Slurm for a job's stream: the
// job's name and id in its working directory.
func outputTemplate(ext string) string { return "%x.%j." + ext }

// expiry is ErrOutputExpired, with what a user needs to know, for a job
// that ended at end (nil: not known to have ended) longer than days ago;
// nil while its output is kept, and always for days 0 (kept for ever).
func expiry(id string, end *metav1.Time, days int32, now time.Time) error {
	if end == nil || days <= 0 {
		return nil
	}
	age := now.Sub(end.Time)
	if age < time.Duration(days)*24*time.Hour {
		return nil
	}
	unit := "days"
	if days == 1 {
		unit = "day"
	}
	return fmt.Errorf("%w: Slurm job %s ended %s ago (%s), and this target keeps a job's output for %d %s after it ends (spec.slurm.outputRetentionDays)",
		ErrOutputExpired, id, duration.HumanDuration(age), end.UTC().Format(time.RFC3339), days, unit)
}

// outputPath is where Render told Slurm to write a job's stream (outputTemplate
// in the job's working directory). It is derived from the job's name and
// id, never from a path a job reports, and must stay absolute and clean.
func outputPath(j *JobInfo, ext string) (string, error) {
	dir := j.WorkDir
	if dir == "" {
		dir = "/tmp"
	}
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir || strings.ContainsAny(j.Name, "/\x00") || j.Name == "" || j.Name == ".." {
		return "", fmt.Errorf("slurm job %d: unexpected working directory %q or name %q", j.JobID, dir, j.Name)
	}
	return filepath.Join(dir, fmt.Sprintf("%s.%d.%s", j.Name, j.JobID, ext)), nil
}

// readOwnedTail reads at most limit bytes from the end of path below root,
// if it is a regular file owned by uid and not a symlink. cut reports
// whether the beginning was left out. Errors name path as the cluster sees
// it, not where the agent mounts it.
func readOwnedTail(root, path string, uid uint32, limit int64) (data []byte, cut bool, err error) {
	// O_NONBLOCK: a FIFO put in the file's place must not hang the agent.
	f, err := os.OpenFile(filepath.Join(root, path), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if pe := (*os.PathError)(nil); errors.As(err, &pe) {
		err = fmt.Errorf("%s: %w", path, pe.Err) // hide the agent's mount
	}
	if errors.Is(err, syscall.ELOOP) {
		return nil, false, fmt.Errorf("%s is a symlink; refusing to follow it", path)
	}
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, false, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return nil, false, fmt.Errorf("%s is not a regular file (%s)", path, fi.Mode().Type())
	case !ok || st.Uid != uid:
		return nil, false, fmt.Errorf("%s is not owned by the job's user (uid %d)", path, uid)
	}
	size := fi.Size()
	// Read one byte before the window too, to know whether the window
	// starts a line; a partial first line is dropped.
	var r io.Reader = f
	if limit > 0 && size > limit {
		if _, err := f.Seek(size-limit-1, io.SeekStart); err != nil {
			return nil, false, err
		}
		cut = true
	}
	if limit > 0 {
		r = io.LimitReader(f, limit+1) // the file may grow while it is read
	}
	data, err = io.ReadAll(r)
	if err != nil {
		return nil, false, err
	}
	if cut {
		if i := bytes.IndexByte(data, '\n'); i >= 0 && i+1 < len(data) {
			data = data[i+1:]
		} else {
			data = data[1:]
		}
	} else if limit > 0 && int64(len(data)) > limit {
		data = data[:limit] // grew past limit since the stat
	}
	return data, cut, nil
}

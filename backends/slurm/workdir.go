package slurm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/trainyard-dev/trainyard/backends"
)

// A job's work directory must exist before the job starts: slurmstepd opens
// the job's output files in it, as the job's user, before the batch script
// runs, and a job whose output cannot be opened fails without a word. The
// directory is the user's own (WorkDir), so only the user can make it, and
// only a job runs as the user: when the agent cannot see the directory, it
// first submits a small job, as the user, that makes it (mode 0700) and
// checks it is the user's own, and holds the real job until that one
// completed (afterok); slurmctld cancels the real job if it failed. One
// such job is made per directory, not per job: the agent sees the directory
// from then on (OutputRoot), or remembers the job's success.

// WorkDirCommentPrefix starts the comment of the jobs that make a user's
// work directory. They carry no Dispatch: ParseComment, the fence and the
// capacity of queued work ignore them.
const WorkDirCommentPrefix = "trainyard-workdir:"

// WorkDirJobName names the jobs that make a user's work directory: the
// name of no Dispatch's job, nor the beginning of one.
const WorkDirJobName = "trainyard-workdir"

// workDirScript makes TRAINYARD_WORKDIR, private to the user, and fails
// if it is not a directory the user owns (a name another user took first,
// or a symlink).
const workDirScript = "#!/bin/bash\nset -euo pipefail\numask 077\n" +
	`export PATH="${PATH:-/usr/local/bin:/usr/bin:/bin}"
dir="${TRAINYARD_WORKDIR:?}"
mkdir -p -- "$dir"
if [[ ! -d "$dir" || -L "$dir" || ! -O "$dir" ]]; then echo "trainyard: $dir is not a directory of $(id -un)" >&2; exit 1; fi
chmod 0700 -- "$dir"
`

// workDirJob is the job that makes job's work directory.
func workDirJob(job *Job) *Job {
	return &Job{
		Name: WorkDirJobName, Comment: WorkDirCommentPrefix + job.WorkDir,
		Partition: job.Partition, Account: job.Account, QOS: job.QOS, User: job.User,
		Nodes: 1, TasksPerNode: 1, TimeLimitMinutes: 1,
		Env:     []string{EnvWorkDir + "=" + job.WorkDir, "SLURM_UMASK=0077"},
		WorkDir: "/", StdoutPath: "/dev/null", StderrPath: "/dev/null", Script: workDirScript,
	}
}

// workDirState is what the backend knows of a work directory.
type workDirState struct {
	// made: the directory exists (a job made it, or the agent saw it).
	made bool
	// job is the job making it, submitted at; 0 when made.
	job int32
	at  time.Time
}

// prepareWorkDir makes sure job's work directory exists before job starts:
// it does when the agent sees it, or a job made it; else job is held
// after the job that makes it, submitted now if none is under way.
func (b *Backend) prepareWorkDir(ctx context.Context, job *Job) error {
	dir := job.WorkDir
	if b.sees(dir) {
		return nil
	}
	b.mu.Lock()
	st, known := b.workDirs[dir]
	if known && !st.made {
		switch j, inView := b.view[st.job]; {
		case inView && slices.Contains(j.JobState, "COMPLETED"):
			st = workDirState{made: true}
			b.workDirs[dir] = st
		case inView && Ended(j):
			known = false // it failed: try again, the job says why in its state
		case !inView && b.listedAt.After(st.at):
			known = false // forgotten before the agent saw it end
		}
	}
	b.mu.Unlock()
	switch {
	case known && st.made:
		return nil
	case known:
		job.After = st.job
		return nil
	}
	at := b.now()
	id, err := b.Client.Submit(ctx, workDirJob(job))
	var he *HTTPError
	if errors.As(err, &he) && he.Permanent {
		return fmt.Errorf("%w: the job that makes work directory %s: %w", backends.ErrRejected, dir, err)
	}
	if err != nil {
		return fmt.Errorf("submit the job that makes work directory %s: %w", dir, err)
	}
	b.mu.Lock()
	if b.workDirs == nil {
		b.workDirs = map[string]workDirState{}
	}
	b.workDirs[dir] = workDirState{job: id, at: at}
	b.mu.Unlock()
	job.After = id
	return nil
}

// sees reports whether the agent sees dir below OutputRoot as a directory,
// not a symlink, that no one but its owner may write to.
func (b *Backend) sees(dir string) bool {
	if b.OutputRoot == "" {
		return false
	}
	fi, err := os.Lstat(filepath.Join(b.OutputRoot, dir))
	return err == nil && fi.IsDir() && fi.Mode().Perm()&0o022 == 0
}

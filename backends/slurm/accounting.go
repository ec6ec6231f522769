package slurm

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// Accounting: slurmctld forgets a finished job MinJobAge after it ended (300 s
// by default, often seconds on busy clusters). When the cluster runs
// slurmdbd, slurmrestd still serves the job's record under /slurmdb/, so an
// agent that was away when the job ended can report its real outcome
// instead of "remote work missing".

// ErrNoAccounting: slurmrestd serves no /slurmdb/ API (slurmrestd started
// without openapi/slurmdbd, or a cluster without slurmdbd).
var ErrNoAccounting = errors.New("slurmrestd serves no accounting (slurmdbd) API")

type accountingAPI interface {
	accountedJob(ctx context.Context, id string, edit func(context.Context, *http.Request) error) (*http.Response, error)
}

func (a api41) accountedJob(ctx context.Context, id string, e func(context.Context, *http.Request) error) (*http.Response, error) {
	return a.c.SlurmdbV0041GetJob(ctx, id, e)
}

func (a api42) accountedJob(ctx context.Context, id string, e func(context.Context, *http.Request) error) (*http.Response, error) {
	return a.c.SlurmdbV0042GetJob(ctx, id, e)
}

// dbJob is a job record of slurmdbd as slurmrestd serves it (v0.0.41 and
// v0.0.42 alike): the fields trainyard reads.
type dbJob struct {
	JobID   int32  `json:"job_id"`
	Name    string `json:"name"`
	User    string `json:"user"`
	WorkDir string `json:"working_directory"`
	Comment struct {
		Job string `json:"job"`
	} `json:"comment"`
	Partition       string `json:"partition"`
	Nodes           string `json:"nodes"`
	AllocationNodes int32  `json:"allocation_nodes"`
	RestartCount    int32  `json:"restart_cnt"`
	State           struct {
		Current []string `json:"current"`
		Reason  string   `json:"reason"`
	} `json:"state"`
	Time struct {
		Start      int64 `json:"start"`
		End        int64 `json:"end"`
		Submission int64 `json:"submission"`
	} `json:"time"`
	ExitCode *ExitCodeInfo `json:"exit_code"`
	// StdOut and StdErr are the job's output paths as it asked for them
	// (Render's templates; empty before slurmdbd 23.02). Not their
	// *_expanded forms: slurmdbd 24.11 joins a relative path to the working
	// directory without a slash ("/scratch/alicetrain.8.out").
	StdOut string `json:"stdout"`
	StdErr string `json:"stderr"`
}

// info converts the record to the JobInfo slurmctld would have served.
func (d *dbJob) info() JobInfo {
	j := JobInfo{
		JobID: d.JobID, Name: d.Name, Comment: d.Comment.Job, UserName: d.User, WorkDir: d.WorkDir,
		Partition: d.Partition, JobState: d.State.Current, StateReason: d.State.Reason, Nodes: d.Nodes,
		RestartCount: d.RestartCount,
		NodeCount:    &noVal{Set: true, Number: int64(d.AllocationNodes)},
		StartTime:    &noVal{Set: d.Time.Start > 0, Number: d.Time.Start},
		EndTime:      &noVal{Set: d.Time.End > 0, Number: d.Time.End},
	}
	j.ExitCode = d.ExitCode
	j.StandardOutput, j.StandardError = d.StdOut, d.StdErr
	return j
}

// AccountedJob reads job id from slurmdbd, for a job slurmctld no longer
// knows. slurmdbd keeps every job that ever had the id (a slurmctld that
// lost its state reuses ids), so comment picks the one trainyard made (the
// newest, should there be several). ErrJobNotFound: no such record;
// ErrNoAccounting: the cluster has no accounting API.
func (c *Client) AccountedJob(ctx context.Context, id int32, comment string) (*JobInfo, error) {
	api, ok := c.api.(accountingAPI)
	if !ok {
		return nil, ErrNoAccounting
	}
	var out struct {
		Jobs []dbJob `json:"jobs"`
	}
	sid := strconv.Itoa(int(id))
	err := c.call(ctx, "get accounted job "+sid, c.ServiceUser, &out, func(e func(context.Context, *http.Request) error) (*http.Response, error) {
		return api.accountedJob(ctx, sid, e)
	})
	var he *HTTPError
	if errors.As(err, &he) && he.Status == http.StatusNotFound && !errors.Is(err, ErrJobNotFound) {
		// slurmrestd answers 404 for a path no loaded plugin serves.
		return nil, errors.Join(ErrNoAccounting, err)
	}
	if err != nil {
		return nil, err
	}
	var best *dbJob
	for i := range out.Jobs {
		j := &out.Jobs[i]
		if j.JobID == id && j.Comment.Job == comment && (best == nil || j.Time.Submission > best.Time.Submission) {
			best = j
		}
	}
	if best == nil {
		return nil, ErrJobNotFound
	}
	info := best.info()
	return &info, nil
}

// accounted reads d's recorded job from accounting once slurmctld has
// forgotten it. Only an ended job counts: a job accounting still shows
// live, which slurmctld does not know, was lost with slurmctld's state.
// Without accounting the job is not found, as before.
func (b *Backend) accounted(ctx context.Context, d *v1alpha1.Dispatch) (*JobInfo, error) {
	id := remoteID(d)
	if id <= 0 {
		return nil, ErrJobNotFound
	}
	j, err := b.Client.AccountedJob(ctx, id, Comment(d))
	switch {
	case errors.Is(err, ErrNoAccounting):
		return nil, ErrJobNotFound
	case err != nil:
		return nil, err
	case !Ended(j):
		return nil, ErrJobNotFound
	}
	return j, nil
}

package slurm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	v0041 "github.com/SlinkyProject/slurm-client/api/v0041"
	v0042 "github.com/SlinkyProject/slurm-client/api/v0042"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// Client speaks to slurmrestd in one of the OpenAPI versions trainyard
// supports. Requests go through SlinkyProject's generated clients; the
// answers are decoded into the few fields trainyard reads, which both
// versions spell alike, so the rest of the backend has one code path.
type Client struct {
	api    versionAPI
	tokens TokenSource
	// ServiceUser is who reads the cluster (jobs, nodes) and cancels jobs.
	ServiceUser string
}

// versionAPI is the part of a generated client trainyard uses.
type versionAPI interface {
	submit(ctx context.Context, body io.Reader, edit func(context.Context, *http.Request) error) (*http.Response, error)
	jobs(ctx context.Context, updateTime *string, edit func(context.Context, *http.Request) error) (*http.Response, error)
	job(ctx context.Context, id string, edit func(context.Context, *http.Request) error) (*http.Response, error)
	cancel(ctx context.Context, id string, edit func(context.Context, *http.Request) error) (*http.Response, error)
	nodes(ctx context.Context, edit func(context.Context, *http.Request) error) (*http.Response, error)
}

// NewClient builds a client for endpoint. serviceUser is the identity used
// for reads and cancels: with a signing key, SlurmUser; with a token, the
// token's own user.
func NewClient(endpoint string, version v1alpha1.SlurmAPIVersion, tokens TokenSource, serviceUser string, hc *http.Client) (*Client, error) {
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	var api versionAPI
	switch version {
	case v1alpha1.SlurmAPIVersion("v0.0.41"), "":
		c, err := v0041.NewClient(endpoint, v0041.WithHTTPClient(hc))
		if err != nil {
			return nil, err
		}
		api = api41{c}
	case v1alpha1.SlurmAPIVersion("v0.0.42"):
		c, err := v0042.NewClient(endpoint, v0042.WithHTTPClient(hc))
		if err != nil {
			return nil, err
		}
		api = api42{c}
	default:
		return nil, fmt.Errorf("slurmrestd API version %q is not supported (v0.0.41, v0.0.42)", version)
	}
	return &Client{api: api, tokens: tokens, ServiceUser: serviceUser}, nil
}

type api41 struct{ c *v0041.Client }

func (a api41) submit(ctx context.Context, body io.Reader, e func(context.Context, *http.Request) error) (*http.Response, error) {
	return a.c.SlurmV0041PostJobSubmitWithBody(ctx, "application/json", body, e)
}
func (a api41) jobs(ctx context.Context, since *string, e func(context.Context, *http.Request) error) (*http.Response, error) {
	return a.c.SlurmV0041GetJobs(ctx, &v0041.SlurmV0041GetJobsParams{UpdateTime: since}, e)
}
func (a api41) job(ctx context.Context, id string, e func(context.Context, *http.Request) error) (*http.Response, error) {
	return a.c.SlurmV0041GetJob(ctx, id, nil, e)
}
func (a api41) cancel(ctx context.Context, id string, e func(context.Context, *http.Request) error) (*http.Response, error) {
	return a.c.SlurmV0041DeleteJob(ctx, id, nil, e)
}
func (a api41) nodes(ctx context.Context, e func(context.Context, *http.Request) error) (*http.Response, error) {
	return a.c.SlurmV0041GetNodes(ctx, nil, e)
}

type api42 struct{ c *v0042.Client }

func (a api42) submit(ctx context.Context, body io.Reader, e func(context.Context, *http.Request) error) (*http.Response, error) {
	return a.c.SlurmV0042PostJobSubmitWithBody(ctx, "application/json", body, e)
}
func (a api42) jobs(ctx context.Context, since *string, e func(context.Context, *http.Request) error) (*http.Response, error) {
	return a.c.SlurmV0042GetJobs(ctx, &v0042.SlurmV0042GetJobsParams{UpdateTime: since}, e)
}
func (a api42) job(ctx context.Context, id string, e func(context.Context, *http.Request) error) (*http.Response, error) {
	return a.c.SlurmV0042GetJob(ctx, id, nil, e)
}
func (a api42) cancel(ctx context.Context, id string, e func(context.Context, *http.Request) error) (*http.Response, error) {
	return a.c.SlurmV0042DeleteJob(ctx, id, nil, e)
}
func (a api42) nodes(ctx context.Context, e func(context.Context, *http.Request) error) (*http.Response, error) {
	return a.c.SlurmV0042GetNodes(ctx, nil, e)
}

// Wire types: the fields of slurmrestd's answers trainyard reads.

type noVal struct {
	Set      bool  `json:"set"`
	Infinite bool  `json:"infinite"`
	Number   int64 `json:"number"`
}

func (n *noVal) value() (int64, bool) {
	if n == nil || !n.Set || n.Infinite {
		return 0, false
	}
	return n.Number, true
}

type apiError struct {
	Error       string `json:"error"`
	ErrorNumber int    `json:"error_number"`
	Description string `json:"description"`
}

type envelope struct {
	Errors   []apiError `json:"errors"`
	Warnings []struct {
		Description string `json:"description"`
	} `json:"warnings"`
}

// JobInfo is a Slurm job as trainyard sees it.
type JobInfo struct {
	JobID          int32         `json:"job_id"`
	Name           string        `json:"name"`
	Comment        string        `json:"comment"`
	UserName       string        `json:"user_name"`
	UserID         *int32        `json:"user_id"`
	WorkDir        string        `json:"current_working_directory"`
	Partition      string        `json:"partition"`
	JobState       []string      `json:"job_state"`
	StateReason    string        `json:"state_reason"`
	Nodes          string        `json:"nodes"`
	BatchHost      string        `json:"batch_host"`
	RestartCount   int32         `json:"restart_cnt"`
	NodeCount      *noVal        `json:"node_count"`
	StartTime      *noVal        `json:"start_time"`
	EndTime        *noVal        `json:"end_time"`
	ExitCode       *ExitCodeInfo `json:"exit_code"`
	StandardOutput string        `json:"standard_output"`
	StandardError  string        `json:"standard_error"`
}

// ExitCodeInfo is how a job ended, as slurmctld and slurmdbd report it.
type ExitCodeInfo struct {
	Status     []string `json:"status"`
	ReturnCode *noVal   `json:"return_code"`
	Signal     *struct {
		ID   *noVal `json:"id"`
		Name string `json:"name"`
	} `json:"signal"`
}

// NodeInfo is a Slurm node as trainyard sees it.
type NodeInfo struct {
	Name       string   `json:"name"`
	State      []string `json:"state"`
	Gres       string   `json:"gres"`
	GresUsed   string   `json:"gres_used"`
	Partitions []string `json:"partitions"`
	CPUs       int64    `json:"cpus"`
	AllocCPUs  int64    `json:"alloc_cpus"`
}

// HTTPError is a refused request; Permanent tells a bad job (retrying the
// same request cannot help) from an unavailable cluster.
type HTTPError struct {
	Op        string
	Status    int
	Messages  []string
	Permanent bool
}

func (e *HTTPError) Error() string {
	msg := strings.Join(e.Messages, "; ")
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("slurmrestd %s: HTTP %d: %s", e.Op, e.Status, msg)
}

// ErrJobNotFound: slurmctld does not know the job id.
var ErrJobNotFound = errors.New("slurm job not found")

// ErrSubmitUncertain: a submit ended without an answer that says whether
// slurmctld took the job (a timeout, a connection lost after the request
// was sent, a 5xx, an answer that cannot be read). The job may exist.
var ErrSubmitUncertain = errors.New("slurmrestd may have accepted the job")

// transportError is a request that got no complete answer.
type transportError struct{ err error }

func (e transportError) Error() string { return e.err.Error() }
func (e transportError) Unwrap() error { return e.err }

// uncertainSubmit reports whether a submit that failed with err may still
// have made a job: anything but a refusal slurmrestd answered below 500, a
// connection that was never opened, or a failure before sending.
func uncertainSubmit(err error) bool {
	var he *HTTPError
	if errors.As(err, &he) {
		return he.Status >= 500 && !he.Permanent
	}
	var te transportError
	if !errors.As(err, &te) {
		return false // no request was sent (credentials)
	}
	var op *net.OpError
	return !errors.As(te.err, &op) || op.Op != "dial"
}

// Errors slurmctld answers for a job it refuses for good (bad partition,
// account, QOS, user or request): retrying the same submit cannot help.
// What the cluster's state refuses now is not here: "Requested partition
// configuration not available now" (a partition down or inactive, or not
// enough of its nodes up) passes when the administrator brings them back,
// so the Dispatch waits and is submitted again.
var permanentErrors = map[string]bool{
	"Invalid partition name specified":                                                      true,
	"Invalid account or account/partition combination specified":                            true,
	"Invalid qos specification":                                                             true,
	"Invalid user id":                                                                       true,
	"Requested node configuration is not available":                                         true,
	"Invalid Trackable RESource (TRES) specification":                                       true,
	"Invalid generic resource (gres) specification":                                         true,
	"Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)": true,
	"Requested time limit is invalid (missing or exceeds some limit)":                       true,
	"Node count specification invalid":                                                      true,
	"Access/permission denied":                                                              true,
	"User not found on host":                                                                true,
}

// call runs one request as user and decodes a 2xx body into out.
func (c *Client) call(ctx context.Context, op, user string, out any,
	do func(edit func(context.Context, *http.Request) error) (*http.Response, error)) error {
	cred, err := c.tokens.Credentials(ctx, user)
	if err != nil {
		return err
	}
	resp, err := do(func(_ context.Context, req *http.Request) error { authorize(req, cred); return nil })
	if err != nil {
		return fmt.Errorf("slurmrestd %s: %w", op, transportError{err})
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return fmt.Errorf("slurmrestd %s: read answer: %w", op, transportError{err})
	}
	var env envelope
	_ = json.Unmarshal(body, &env)
	if resp.StatusCode >= 300 {
		e := &HTTPError{Op: op, Status: resp.StatusCode}
		for _, ae := range env.Errors {
			m := ae.Error
			if ae.Description != "" && ae.Description != m {
				m = strings.TrimSpace(m + " (" + ae.Description + ")")
			}
			e.Messages = append(e.Messages, m)
			e.Permanent = e.Permanent || permanentErrors[ae.Error]
		}
		if len(e.Messages) == 0 && len(body) > 0 && resp.StatusCode != http.StatusUnauthorized {
			e.Messages = append(e.Messages, strings.TrimSpace(string(bytes.ToValidUTF8(body[:min(len(body), 512)], nil))))
		}
		for _, m := range e.Messages {
			if strings.Contains(m, "Invalid job id") || strings.Contains(m, "Unknown job") {
				return fmt.Errorf("%w: %w", ErrJobNotFound, e)
			}
		}
		return e
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			return fmt.Errorf("slurmrestd %s: decode answer: %w", op, transportError{err})
		}
	}
	return nil
}

// jobDesc is the submit request, the same in v0.0.41 and v0.0.42.
type jobDesc struct {
	Name                    string   `json:"name"`
	Comment                 string   `json:"comment"`
	Partition               string   `json:"partition,omitempty"`
	Account                 string   `json:"account,omitempty"`
	QOS                     string   `json:"qos,omitempty"`
	MinimumNodes            int32    `json:"minimum_nodes"`
	MaximumNodes            int32    `json:"maximum_nodes"`
	TasksPerNode            int32    `json:"tasks_per_node"`
	Tasks                   int32    `json:"tasks"`
	TresPerNode             string   `json:"tres_per_node,omitempty"`
	TimeLimit               *noVal   `json:"time_limit,omitempty"`
	Environment             []string `json:"environment"`
	CurrentWorkingDirectory string   `json:"current_working_directory"`
	StandardOutput          string   `json:"standard_output,omitempty"`
	StandardError           string   `json:"standard_error,omitempty"`
	Script                  string   `json:"script"`
	Requeue                 bool     `json:"requeue"`
	RequiredNodes           []string `json:"required_nodes,omitempty"`
	RequiredSwitches        *noVal   `json:"required_switches,omitempty"`
	Dependency              string   `json:"dependency,omitempty"`
	Flags                   []string `json:"flags,omitempty"`
}

// Submit submits job as job.User and returns the job id. An error
// wrapping ErrSubmitUncertain means the job may exist all the same.
func (c *Client) Submit(ctx context.Context, job *Job) (int32, error) {
	desc := jobDesc{
		Name: job.Name, Comment: job.Comment, Partition: job.Partition, Account: job.Account, QOS: job.QOS,
		MinimumNodes: job.Nodes, MaximumNodes: job.Nodes, TasksPerNode: job.TasksPerNode,
		Tasks: job.Nodes * job.TasksPerNode, Environment: job.Env, CurrentWorkingDirectory: job.WorkDir,
		StandardOutput: job.StdoutPath, StandardError: job.StderrPath, Script: job.Script, Requeue: job.Requeue,
		RequiredNodes: job.RequiredNodes,
	}
	if job.GPUsPerNode > 0 {
		desc.TresPerNode = "gres/gpu:" + strconv.FormatInt(job.GPUsPerNode, 10)
	}
	if job.TimeLimitMinutes > 0 {
		desc.TimeLimit = &noVal{Set: true, Number: job.TimeLimitMinutes}
	}
	if job.MaxSwitches > 0 {
		desc.RequiredSwitches = &noVal{Set: true, Number: int64(job.MaxSwitches)}
	}
	if job.After > 0 {
		// A job whose dependency can never be met is cancelled, not left
		// pending for ever.
		desc.Dependency = "afterok:" + strconv.Itoa(int(job.After))
		desc.Flags = []string{"KILL_INVALID_DEPENDENCY"}
	}
	if desc.CurrentWorkingDirectory == "" {
		// slurmrestd has no login shell to take a directory from.
		desc.CurrentWorkingDirectory = "/tmp"
	}
	body, err := json.Marshal(map[string]any{"job": desc})
	if err != nil {
		return 0, err
	}
	var out struct {
		JobID int32 `json:"job_id"`
	}
	err = c.call(ctx, "submit", job.User, &out, func(e func(context.Context, *http.Request) error) (*http.Response, error) {
		return c.api.submit(ctx, bytes.NewReader(body), e)
	})
	if err != nil {
		if uncertainSubmit(err) {
			return 0, fmt.Errorf("%w: %w", ErrSubmitUncertain, err)
		}
		return 0, err
	}
	if out.JobID == 0 {
		return 0, fmt.Errorf("%w: slurmrestd submit: answer has no job_id", ErrSubmitUncertain)
	}
	return out.JobID, nil
}

// Jobs lists every job slurmctld still knows (running, pending and those
// finished less than MinJobAge ago).
func (c *Client) Jobs(ctx context.Context) ([]JobInfo, error) {
	l, err := c.JobsSince(ctx, 0)
	return l.Jobs, err
}

// JobList is one answer of JobsSince.
type JobList struct {
	// Jobs is every job slurmctld still knows, unless Unchanged.
	Jobs []JobInfo
	// LastUpdate is slurmctld's time of this list, to ask for changes
	// since; 0 when Unchanged.
	LastUpdate int64
	// Unchanged: no job changed since the list of the given time, and
	// slurmctld sent none.
	Unchanged bool
}

// JobsSince lists the cluster's jobs unless none changed since the list
// whose LastUpdate is since (0: list in any case). slurmctld answers every
// job or none (update_time filters whole answers, not jobs), and a change
// within the second of since counts as a change, so a poller that passes
// its last LastUpdate misses nothing and pays for a full answer only when
// something changed.
func (c *Client) JobsSince(ctx context.Context, since int64) (JobList, error) {
	var out struct {
		Jobs       []JobInfo `json:"jobs"`
		LastUpdate *noVal    `json:"last_update"`
		Warnings   []struct {
			Description string `json:"description"`
		} `json:"warnings"`
	}
	var param *string
	if since > 0 {
		param = ptrTo(strconv.FormatInt(since, 10))
	}
	err := c.call(ctx, "list jobs", c.ServiceUser, &out, func(e func(context.Context, *http.Request) error) (*http.Response, error) {
		return c.api.jobs(ctx, param, e)
	})
	if err != nil {
		return JobList{}, err
	}
	l := JobList{Jobs: out.Jobs}
	l.LastUpdate, _ = out.LastUpdate.value()
	if since > 0 && len(out.Jobs) == 0 {
		for _, w := range out.Warnings {
			l.Unchanged = l.Unchanged || strings.Contains(w.Description, "No job changes")
		}
		l.Unchanged = l.Unchanged || l.LastUpdate == 0
	}
	return l, nil
}

func ptrTo[T any](v T) *T { return &v }

// Job reads one job; ErrJobNotFound when slurmctld has forgotten it.
func (c *Client) Job(ctx context.Context, id int32) (*JobInfo, error) {
	var out struct {
		Jobs []JobInfo `json:"jobs"`
	}
	sid := strconv.Itoa(int(id))
	err := c.call(ctx, "get job "+sid, c.ServiceUser, &out, func(e func(context.Context, *http.Request) error) (*http.Response, error) {
		return c.api.job(ctx, sid, e)
	})
	if err != nil {
		return nil, err
	}
	for i := range out.Jobs {
		if out.Jobs[i].JobID == id {
			return &out.Jobs[i], nil
		}
	}
	return nil, ErrJobNotFound
}

// Cancel signals the job to end (SIGKILL to all steps, as scancel does).
// A job that already ended is not an error.
func (c *Client) Cancel(ctx context.Context, id int32) error {
	sid := strconv.Itoa(int(id))
	err := c.call(ctx, "cancel job "+sid, c.ServiceUser, nil, func(e func(context.Context, *http.Request) error) (*http.Response, error) {
		return c.api.cancel(ctx, sid, e)
	})
	var he *HTTPError
	if errors.As(err, &he) {
		for _, m := range he.Messages {
			if strings.Contains(m, "already completed") || strings.Contains(m, "Job/step already completing or completed") {
				return nil
			}
		}
	}
	return err
}

// Nodes lists the cluster's nodes.
func (c *Client) Nodes(ctx context.Context) ([]NodeInfo, error) {
	var out struct {
		Nodes []NodeInfo `json:"nodes"`
	}
	err := c.call(ctx, "list nodes", c.ServiceUser, &out, func(e func(context.Context, *http.Request) error) (*http.Response, error) {
		return c.api.nodes(ctx, e)
	})
	return out.Nodes, err
}

package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

type logsOptions struct {
	replica    string
	tail       int64
	limitBytes int64
	timeout    time.Duration
}

func newLogsCommand(e *env) *cobra.Command {
	var f hubFlags
	o := logsOptions{}
	cmd := &cobra.Command{
		Use:   "logs TRAINJOB",
		Short: "Print the output of a TrainJob, read on its spoke or Slurm cluster by the agent",
		Long: `Print the end of a TrainJob's output where it runs now: the rank-0 pod's
trainer container on a Kubernetes spoke (or the pod --replica names), or the
job's output files on a Slurm cluster. The CLI never talks to the spoke nor
to the agents' namespaces: it creates a LogRequest in the job's namespace,
the hub checks that you may get the TrainJob and its trainjobs/log
subresource, asks the target's agent and writes the answer, at most 512 KiB,
into the LogRequest's status, which the CLI prints and deletes. It needs
permission to create, get and delete LogRequests in the job's namespace.`,
		Example: e.examples("logs my-job -n team-a", "logs my-job --tail 50", "logs my-job --replica node-0-1"),
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.tail < -1 || o.limitBytes < 0 || o.limitBytes > v1alpha1.MaxLogsBytes || o.timeout <= 0 {
				return errors.New("--tail must be -1 or more, --limit-bytes 0 to 524288 and --request-timeout positive")
			}
			h, err := f.connect()
			if err != nil {
				return err
			}
			return printLogs(cmd.Context(), h, e, args[0], o)
		},
	}
	f.addTo(cmd, true, false)
	cmd.Flags().StringVar(&o.replica, "replica", "", "replica to read, as <replicatedJob>-<jobIndex>-<podIndex> (default: rank 0)")
	cmd.Flags().Int64Var(&o.tail, "tail", -1, "lines from the end to print (-1: all that fit the size limit)")
	cmd.Flags().Int64Var(&o.limitBytes, "limit-bytes", 0, "bytes from the end to print at most (0: 512 KiB)")
	cmd.Flags().DurationVar(&o.timeout, "request-timeout", 35*time.Second, "how long to wait for the answer")
	return cmd
}

// printLogs asks for output through a LogRequest and prints the answer.
func printLogs(ctx context.Context, h *hub, e *env, name string, o logsOptions) error {
	if o.tail == 0 {
		return nil // nothing asked for
	}
	var tj trainer.TrainJob
	if err := h.Get(ctx, client.ObjectKey{Namespace: h.namespace, Name: name}, &tj); err != nil {
		return lacksRights(notFoundIn(explain(err), h.namespace), "read trainjob "+name, h.namespace, TenantRole)
	}
	who, err := whoAmI(ctx, h)
	if err != nil {
		return err
	}
	lr := &v1alpha1.LogRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.namespace, GenerateName: logRequestPrefix(name)},
		Spec: v1alpha1.LogRequestSpec{TrainJobName: name, Replica: o.replica, LimitBytes: o.limitBytes,
			TailLines: max(o.tail, 0), Requester: who},
	}
	if err := h.Create(ctx, lr); err != nil {
		if apierrors.IsForbidden(err) {
			return lacksRights(err, "ask for logs (create a LogRequest)", h.namespace, TenantRole)
		}
		return fmt.Errorf("create a LogRequest in namespace %s: %w", h.namespace, explain(err))
	}
	// The answer has been read once this returns: leave nothing behind
	// (the hub collects it after a while anyway, should this fail).
	defer func() { _ = h.Delete(context.WithoutCancel(ctx), lr) }()
	if err := awaitAnswer(ctx, h, e, lr, o.timeout); err != nil {
		return err
	}
	switch lr.Status.Phase {
	case v1alpha1.LogRequestDenied:
		err := fmt.Errorf("not allowed to read the logs of trainjob %s/%s: %s", h.namespace, name, lr.Status.Message)
		if strings.Contains(lr.Status.Message, " may not ") {
			// The hub's SubjectAccessReview said no, not a missing policy.
			err = fmt.Errorf("%w; an administrator grants it by binding the ClusterRole %s to you in that namespace", err, TenantRole)
		}
		return err
	case v1alpha1.LogRequestFailed:
		return errors.New(lr.Status.Message)
	}
	if _, err := fmt.Fprint(e.Out, lr.Status.Log); err != nil {
		return err
	}
	if lr.Status.Truncated {
		fmt.Fprintf(e.ErrOut, "(older output left out; from %s)\n", lr.Status.Source)
	}
	return nil
}

// logRequestPrefix is the generateName of a job's LogRequests.
func logRequestPrefix(job string) string {
	const suffix = "-logs-"
	if len(job) > 200 {
		job = job[:200]
	}
	return job + suffix
}

// awaitAnswer polls lr until the hub has made it final. The reads use ctx,
// not a context with the deadline, so a read near the deadline does not
// fail on the client's rate limiter instead of saying what timed out.
func awaitAnswer(ctx context.Context, h *hub, e *env, lr *v1alpha1.LogRequest, timeout time.Duration) error {
	key := client.ObjectKeyFromObject(lr)
	deadline := time.Now().Add(timeout) // wall time: e.clock may be a fixed clock for ages
	for {
		if err := h.Get(ctx, key, lr); err != nil {
			return fmt.Errorf("read LogRequest %s/%s: %w", key.Namespace, key.Name, explain(err))
		}
		if lr.Status.Phase.IsFinal() {
			return nil
		}
		if !time.Now().Before(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(250*time.Millisecond, max(time.Until(deadline), 0))):
		}
	}
	if lr.Status.Target != "" {
		return fmt.Errorf("the agent of target %s did not answer within %s; is it running? (see '%s targets')", lr.Status.Target, timeout, e.name)
	}
	return fmt.Errorf("the hub did not take up LogRequest %s/%s within %s; is trainyard-hub running?", key.Namespace, key.Name, timeout)
}

// whoAmI asks the API server who the CLI's credentials authenticate as
// (a SelfSubjectReview), for the requester of a LogRequest. The hub's
// admission policy checks it against the same identity.
func whoAmI(ctx context.Context, c client.Client) (v1alpha1.Requester, error) {
	ssr := &unstructured.Unstructured{}
	ssr.SetAPIVersion("authentication.k8s.io/v1")
	ssr.SetKind("SelfSubjectReview")
	if err := c.Create(ctx, ssr); err != nil {
		return v1alpha1.Requester{}, fmt.Errorf("ask the API server who you are (SelfSubjectReview): %w", explain(err))
	}
	user, _, _ := unstructured.NestedString(ssr.Object, "status", "userInfo", "username")
	groups, _, _ := unstructured.NestedStringSlice(ssr.Object, "status", "userInfo", "groups")
	if user == "" {
		return v1alpha1.Requester{}, errors.New("the API server did not say who you are (SelfSubjectReview without a username)")
	}
	return v1alpha1.Requester{Username: user, Groups: groups}, nil
}

package hubview

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// LogsOptions say what output FetchLogs asks for.
type LogsOptions struct {
	// Replica is the pod to read, as <replicatedJob>-<jobIndex>-<podIndex>;
	// "" for rank 0.
	Replica string
	// Tail is how many lines from the end to return: -1 for all that fit
	// the size limit, 0 for nothing (nothing is asked).
	Tail int64
	// LimitBytes bounds the bytes from the end; 0 for v1alpha1.MaxLogsBytes.
	LimitBytes int64
	// Timeout bounds the wait for the answer.
	Timeout time.Duration
	// Command is the CLI's name as the user typed it, for hints; default
	// "trainyard".
	Command string
}

// Logs is the hub's answer to a LogRequest.
type Logs struct {
	Text string
	// Truncated says older output was left out; Source says where the
	// output was read.
	Truncated bool
	Source    string
}

// Note is what a reader is told beside the text: that older output was
// left out, or "".
func (l Logs) Note() string {
	if !l.Truncated {
		return ""
	}
	return fmt.Sprintf("(older output left out; from %s)", l.Source)
}

// FetchLogs is what `trainyard logs` prints of TrainJob ns/name: it creates
// a LogRequest in namespace ns, which the hub authorizes and relays to the
// job's agent, waits up to o.Timeout for its answer, and deletes it.
func FetchLogs(ctx context.Context, c client.Client, ns, name string, o LogsOptions) (Logs, error) {
	if o.Tail == 0 {
		return Logs{}, nil // nothing asked for
	}
	var tj trainer.TrainJob
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &tj); err != nil {
		return Logs{}, lacksRights(notFoundIn(Explain(err), ns), "read trainjob "+name, ns, TenantRole)
	}
	who, err := whoAmI(ctx, c)
	if err != nil {
		return Logs{}, err
	}
	lr := &v1alpha1.LogRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: logRequestPrefix(name)},
		Spec: v1alpha1.LogRequestSpec{TrainJobName: name, Replica: o.Replica, LimitBytes: o.LimitBytes,
			TailLines: max(o.Tail, 0), Requester: who},
	}
	if err := c.Create(ctx, lr); err != nil {
		if apierrors.IsForbidden(err) {
			return Logs{}, lacksRights(err, "ask for logs (create a LogRequest)", ns, TenantRole)
		}
		return Logs{}, fmt.Errorf("create a LogRequest in namespace %s: %w", ns, Explain(err))
	}
	// The answer has been read once this returns: leave nothing behind
	// (the hub collects it after a while anyway, should this fail).
	defer func() { _ = c.Delete(context.WithoutCancel(ctx), lr) }()
	if err := awaitAnswer(ctx, c, lr, o.Timeout, cmp.Or(o.Command, "trainyard")); err != nil {
		return Logs{}, err
	}
	switch lr.Status.Phase {
	case v1alpha1.LogRequestDenied:
		err := fmt.Errorf("not allowed to read the logs of trainjob %s/%s: %s", ns, name, lr.Status.Message)
		if strings.Contains(lr.Status.Message, " may not ") {
			// The hub's SubjectAccessReview said no, not a missing policy.
			err = fmt.Errorf("%w; an administrator grants it by binding the ClusterRole %s to you in that namespace", err, TenantRole)
		}
		return Logs{}, err
	case v1alpha1.LogRequestFailed:
		return Logs{}, errors.New(lr.Status.Message)
	}
	return Logs{Text: lr.Status.Log, Truncated: lr.Status.Truncated, Source: lr.Status.Source}, nil
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
// command is the CLI's name, for the hint.
func awaitAnswer(ctx context.Context, c client.Reader, lr *v1alpha1.LogRequest, timeout time.Duration, command string) error {
	key := client.ObjectKeyFromObject(lr)
	deadline := time.Now().Add(timeout) // wall time: the CLI's clock may be a fixed clock for ages
	for {
		if err := c.Get(ctx, key, lr); err != nil {
			return fmt.Errorf("read LogRequest %s/%s: %w", key.Namespace, key.Name, Explain(err))
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
		return fmt.Errorf("the agent of target %s did not answer within %s; is it running? (see '%s targets')", lr.Status.Target, timeout, command)
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
		return v1alpha1.Requester{}, fmt.Errorf("ask the API server who you are (SelfSubjectReview): %w", Explain(err))
	}
	user, _, _ := unstructured.NestedString(ssr.Object, "status", "userInfo", "username")
	groups, _, _ := unstructured.NestedStringSlice(ssr.Object, "status", "userInfo", "groups")
	if user == "" {
		return v1alpha1.Requester{}, errors.New("the API server did not say who you are (SelfSubjectReview without a username)")
	}
	return v1alpha1.Requester{Username: user, Groups: groups}, nil
}

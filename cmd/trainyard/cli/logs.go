package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
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
job's output files on a Slurm cluster. The CLI never talks to the spoke: it
asks the target's agent through the hub (an annotation on the live Dispatch)
and prints the agent's answer, at most 512 KiB. It needs permission to patch
Dispatches and read ConfigMaps in the target's agent namespace.`,
		Example: e.examples("logs my-job -n team-a", "logs my-job --tail 50", "logs my-job --replica node-0-1"),
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.tail < -1 || o.limitBytes < 0 || o.timeout <= 0 {
				return errors.New("--tail must be -1 or more, --limit-bytes 0 or more and --request-timeout positive")
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
	cmd.Flags().DurationVar(&o.timeout, "request-timeout", 30*time.Second, "how long to wait for the agent's answer")
	return cmd
}

// printLogs asks the live Dispatch's agent for output and prints its answer.
func printLogs(ctx context.Context, h *hub, e *env, name string, o logsOptions) error {
	s, err := readJobState(ctx, h, e, name)
	if err != nil {
		return err
	}
	d := s.live
	if d == nil {
		return fmt.Errorf("trainjob %s/%s runs nowhere yet (phase %s); see '%s describe %s'", h.namespace, name, s.phase(), e.name, name)
	}
	req := v1alpha1.LogsRequest{ID: requestID(), Replica: o.replica, LimitBytes: o.limitBytes}
	if o.tail > 0 {
		req.TailLines = o.tail
	} else if o.tail == 0 {
		return nil // nothing asked for
	}
	raw, err := json.Marshal(req)
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{v1alpha1.AnnotationLogsRequest: string(raw)}}})
	if err != nil {
		return err
	}
	if err := h.Patch(ctx, d.DeepCopy(), client.RawPatch("application/merge-patch+json", patch)); err != nil {
		return fmt.Errorf("ask the agent of target %s for logs (patch dispatch %s/%s): %w", d.Spec.TargetName, d.Namespace, d.Name, explain(err))
	}
	answer, err := awaitAnswer(ctx, h, e, d, req.ID, o.timeout)
	if err != nil {
		return err
	}
	// The answer has been read: leave nothing behind (owner references
	// collect it with the Dispatch anyway, should this fail).
	defer func() { _ = h.Delete(context.WithoutCancel(ctx), answer) }()
	if msg := answer.Annotations[v1alpha1.AnnotationLogsError]; msg != "" {
		return fmt.Errorf("target %s: %s", d.Spec.TargetName, msg)
	}
	if _, err := fmt.Fprint(e.Out, answer.Data[v1alpha1.LogsDataKey]); err != nil {
		return err
	}
	if answer.Annotations[v1alpha1.AnnotationLogsTruncated] == "true" {
		fmt.Fprintf(e.ErrOut, "(older output left out; from %s)\n", answer.Annotations[v1alpha1.AnnotationLogsSource])
	}
	return nil
}

// awaitAnswer polls the Dispatch's logs ConfigMap until it answers id.
func awaitAnswer(ctx context.Context, h *hub, e *env, d *v1alpha1.Dispatch, id string, timeout time.Duration) (*corev1.ConfigMap, error) {
	key := client.ObjectKey{Namespace: d.Namespace, Name: v1alpha1.LogsAnswerName(d.Name)}
	var cm corev1.ConfigMap
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		err := h.Get(ctx, key, &cm)
		switch {
		case apierrors.IsNotFound(err):
			return false, nil
		case err != nil && ctx.Err() != nil:
			return false, ctx.Err() // the wait is over
		case err != nil:
			return false, fmt.Errorf("read the agent's answer %s/%s: %w", key.Namespace, key.Name, explain(err))
		}
		return cm.Annotations[v1alpha1.AnnotationLogsRequestID] == id, nil
	})
	if wait.Interrupted(err) {
		return nil, fmt.Errorf("the agent of target %s did not answer within %s; is it running? (see '%s targets')", d.Spec.TargetName, timeout, e.name)
	}
	return &cm, err
}

func requestID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

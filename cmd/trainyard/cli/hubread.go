package cli

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// This file is the read side of the hub that other front ends (the
// dashboard) share with the commands: the same join of TrainJobs,
// Workloads and Dispatches, the same description and the same logs request.

// Connect builds a client of the hub from a kubeconfig path ("" for
// client-go's default loading rules) and context ("" for the current one).
// It returns the context's namespace too.
func Connect(kubeconfig, kubeContext string) (client.Client, string, error) {
	h, err := (&hubFlags{kubeconfig: kubeconfig, context: kubeContext}).connect()
	if err != nil {
		return nil, "", err
	}
	return h.Client, h.namespace, nil
}

// Scheme knows the kinds the CLI reads: core, Trainer, Kueue and
// trainyard's.
func Scheme() *runtime.Scheme { return scheme() }

// JobInfo is a job's summary with what a picture of the fleet draws beside
// it.
type JobInfo struct {
	JobSummary
	// PodSets are the live Dispatch's placement.
	PodSets []v1alpha1.PodSetPlacement
	// Conditions are the TrainJob's.
	Conditions []metav1.Condition
}

// ListJobs summarizes the TrainJobs the user can list: all namespaces, or
// namespace ns when listing across namespaces is forbidden. Warnings say
// what could not be read.
func ListJobs(ctx context.Context, c client.Reader, ns string) ([]JobInfo, []string, error) {
	var warnings []string
	var l trainer.TrainJobList
	scope := ""
	err := c.List(ctx, &l)
	if apierrors.IsForbidden(err) && ns != "" {
		warnings = append(warnings, fmt.Sprintf("cannot list TrainJobs in all namespaces: showing namespace %s only", ns))
		scope = ns
		err = c.List(ctx, &l, client.InNamespace(ns))
	}
	if err != nil {
		return nil, warnings, explain(err)
	}
	lists, err := listWorkloadsAndDispatches(ctx, c, scope)
	if err != nil {
		return nil, warnings, err
	}
	ix := newHubIndex(lists.workloads, lists.dispatches)
	out := make([]JobInfo, 0, len(l.Items))
	for i := range l.Items {
		s := ix.state(&l.Items[i])
		j := JobInfo{JobSummary: summarize(s), Conditions: s.tj.Status.Conditions}
		if s.live != nil {
			j.PodSets = s.live.Spec.PodSets
		}
		out = append(out, j)
	}
	return out, append(warnings, lists.warnings...), nil
}

// DescribeJob is what `trainyard describe` shows of TrainJob ns/name, with
// the warnings it would print.
func DescribeJob(ctx context.Context, c client.Client, ns, name string) (*Description, []string, error) {
	var errOut bytes.Buffer
	e := &env{Streams: Streams{ErrOut: &errOut}, clock: clock.RealClock{}, name: DefaultName}
	d, err := describeJob(ctx, &hub{Client: c, namespace: ns}, e, name)
	return d, warningLines(errOut.String()), err
}

// FetchLogs is what `trainyard logs ns/name --tail tail` prints: it creates
// a LogRequest in namespace ns, which the hub authorizes and relays to the
// job's agent, and waits up to timeout for its answer. The note says when
// older output was left out.
func FetchLogs(ctx context.Context, c client.Client, ns, name string, tail int64, timeout time.Duration) (out string, notes []string, err error) {
	var stdout, errOut bytes.Buffer
	e := &env{Streams: Streams{Out: &stdout, ErrOut: &errOut}, clock: clock.RealClock{}, name: DefaultName}
	err = printLogs(ctx, &hub{Client: c, namespace: ns}, e, name, logsOptions{tail: tail, timeout: timeout})
	return stdout.String(), warningLines(errOut.String()), err
}

// warningLines splits printed warnings into lines, dropping the "warning: " prefix.
func warningLines(s string) []string {
	var out []string
	for l := range strings.Lines(s) {
		if l = strings.TrimSpace(strings.TrimPrefix(l, "warning:")); l != "" {
			out = append(out, l)
		}
	}
	return out
}

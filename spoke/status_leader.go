package spoke

import (
	"context"
	"encoding/json"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LabelStatusLeader marks the agent pod whose replica is elected: the
// status endpoint listens there only (reports are kept in the elected
// replica's memory and written by it), so the agent chart's Service selects
// this label besides the agent's own and a standby receives no report. A
// report that reaches a standby all the same (in the seconds a leadership
// changes hands) finds no listener and is refused at connect, which
// Trainer's callbacks log before they report again.
const LabelStatusLeader = "trainyard.dev/status-leader"

// statusLeaderRetry is how often a failed label patch is tried again.
const statusLeaderRetry = 2 * time.Second

// statusLeaderLabel keeps LabelStatusLeader on the elected replica's pod
// only. It runs on every replica: at start it takes the label off its own
// pod (left there by an earlier run of the pod that led), once elected it
// puts it on and takes it off any other agent pod, and when it stops it
// takes it off again so the Service stops routing to it at once.
type statusLeaderLabel struct {
	// Spoke reads and patches pods in Namespace.
	Spoke     client.Client
	Namespace string
	// Pod is this replica's pod (the downward API's metadata.name).
	Pod     string
	Elected <-chan struct{}
	Log     logr.Logger
}

// addStatusLeaderLabel keeps the label on pod, in namespace of the
// cluster of cfg, while mgr's replica is elected.
func addStatusLeaderLabel(mgr ctrl.Manager, cfg *rest.Config, namespace, pod string) error {
	c, err := client.New(cfg, client.Options{Scheme: SpokeScheme()})
	if err != nil {
		return err
	}
	return mgr.Add(&statusLeaderLabel{Spoke: c, Namespace: namespace, Pod: pod, Elected: mgr.Elected(), Log: ctrl.Log.WithName("status-leader")})
}

// NeedLeaderElection: every replica clears its own pod's label.
func (s *statusLeaderLabel) NeedLeaderElection() bool { return false }

// Start runs until ctx ends.
func (s *statusLeaderLabel) Start(ctx context.Context) error {
	select {
	case <-s.Elected:
	default:
		s.retry(ctx, func() error { return s.set(ctx, s.Pod, false) })
	}
	select {
	case <-ctx.Done():
		return nil
	case <-s.Elected:
	}
	s.retry(ctx, func() error { return s.lead(ctx) })
	<-ctx.Done()
	stop, cancel := context.WithTimeout(context.Background(), statusLeaderRetry)
	defer cancel()
	if err := s.set(stop, s.Pod, false); err != nil {
		s.Log.Error(err, "taking the status leader label off this pod")
	}
	return nil
}

// lead labels this pod and unlabels every other labelled one.
func (s *statusLeaderLabel) lead(ctx context.Context) error {
	if err := s.set(ctx, s.Pod, true); err != nil {
		return err
	}
	var pods corev1.PodList
	if err := s.Spoke.List(ctx, &pods, client.InNamespace(s.Namespace), client.HasLabels{LabelStatusLeader}); err != nil {
		return err
	}
	for _, p := range pods.Items {
		if p.Name != s.Pod {
			if err := s.set(ctx, p.Name, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// set puts the label on pod (on) or takes it off; a pod that is gone has
// none.
func (s *statusLeaderLabel) set(ctx context.Context, pod string, on bool) error {
	var value any
	if on {
		value = "true"
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{LabelStatusLeader: value}}})
	if err != nil {
		return err
	}
	p := &corev1.Pod{}
	p.Namespace, p.Name = s.Namespace, pod
	return client.IgnoreNotFound(s.Spoke.Patch(ctx, p, client.RawPatch(types.MergePatchType, body)))
}

// retry calls f until it succeeds or ctx ends.
func (s *statusLeaderLabel) retry(ctx context.Context, f func() error) {
	for {
		err := f()
		if err == nil {
			return
		}
		s.Log.Error(err, "setting the status leader label")
		select {
		case <-ctx.Done():
			return
		case <-time.After(statusLeaderRetry):
		}
	}
}

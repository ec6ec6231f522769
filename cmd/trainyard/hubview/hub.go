// Package hubview is the hub as the trainyard CLI and its dashboard read
// it: a connection with the user's own kubeconfig, and TrainJobs joined to
// their Kueue Workloads and Dispatches (Job, Index), summarized for a list
// (JobSummary, JobInfo), described in full (Description), with their
// progress, and asked for their output through a LogRequest (FetchLogs).
// It creates nothing but LogRequests (and the SelfSubjectReview that names
// their requester) and prints nothing: the commands in package cli print
// tables and text, the dashboard renders pages.
package hubview

import (
	"fmt"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// Hub is a connection to the hub cluster.
type Hub struct {
	client.Client
	// Namespace is the one -n or the kubeconfig context chose.
	Namespace string
}

// Connect builds a client of the hub from a kubeconfig path ("" for
// client-go's default loading rules: KUBECONFIG, then ~/.kube/config, then
// the in-cluster config), a context ("" for the current one) and a
// namespace ("" for the context's).
func Connect(kubeconfig, kubeContext, namespace string) (*Hub, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: kubeContext}
	overrides.Context.Namespace = namespace
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return nil, err
	}
	return &Hub{Client: c, Namespace: ns}, nil
}

// Scheme knows the kinds the CLI reads: core, Trainer, Kueue and
// trainyard's.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(s))
	utilruntime.Must(trainer.AddToScheme(s))
	utilruntime.Must(kueue.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}

// Explain adds a hint to errors a user can act on.
func Explain(err error) error {
	if err == nil {
		return nil
	}
	if apimeta.IsNoMatchError(err) {
		return fmt.Errorf("%w (are Kueue, Trainer and trainyard's CRDs installed on this cluster?)", err)
	}
	return err
}

package cli

import (
	"fmt"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// hubFlags are kubectl's connection flags. Without --kubeconfig, client-go's
// default loading rules apply (KUBECONFIG, then ~/.kube/config, then the
// in-cluster config).
type hubFlags struct {
	kubeconfig    string
	context       string
	namespace     string
	allNamespaces bool
}

// addTo registers the flags on cmd; namespaced commands get -n, and
// listing commands -A as well.
func (f *hubFlags) addTo(cmd *cobra.Command, namespaced, all bool) {
	cmd.Flags().StringVar(&f.kubeconfig, "kubeconfig", "", "path to the hub's kubeconfig file")
	cmd.Flags().StringVar(&f.context, "context", "", "kubeconfig context to use")
	if namespaced {
		cmd.Flags().StringVarP(&f.namespace, "namespace", "n", "", "namespace (default: the context's namespace)")
	}
	if all {
		cmd.Flags().BoolVarP(&f.allNamespaces, "all-namespaces", "A", false, "list across all namespaces")
	}
}

func (f *hubFlags) clientConfig() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: f.context}
	overrides.Context.Namespace = f.namespace
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
}

// hub is a connection to the hub cluster.
type hub struct {
	client.Client
	// namespace is the one -n or the kubeconfig context chose.
	namespace string
}

// connect builds a client of the hub from the flags.
func (f *hubFlags) connect() (*hub, error) {
	cc := f.clientConfig()
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme()})
	if err != nil {
		return nil, err
	}
	return &hub{Client: c, namespace: ns}, nil
}

// scheme knows the kinds the CLI reads.
func scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(s))
	utilruntime.Must(trainer.AddToScheme(s))
	utilruntime.Must(kueue.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}

// explain adds a hint to errors a user can act on.
func explain(err error) error {
	if err == nil {
		return nil
	}
	if apimeta.IsNoMatchError(err) {
		return fmt.Errorf("%w (are Kueue, Trainer and trainyard's CRDs installed on this cluster?)", err)
	}
	return err
}

package cli

import (
	"github.com/spf13/cobra"

	"github.com/trainyard-dev/trainyard/cmd/trainyard/hubview"
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

// connect builds a client of the hub from the flags.
func (f *hubFlags) connect() (*hubview.Hub, error) {
	return hubview.Connect(f.kubeconfig, f.context, f.namespace)
}

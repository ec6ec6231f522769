package spoke

import (
	"fmt"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/backends/kubework"
	"github.com/trainyard-dev/trainyard/spoke/statusapi"
)

// DefaultStatusCAConfigMap is the ConfigMap in each tenant namespace that
// holds the agent's status CA.
const DefaultStatusCAConfigMap = "trainyard-status-ca"

// KubeStatus configures the status endpoint of a Kubernetes agent: Trainer's
// TrainJob status API behind the agent's Service on the spoke, reached by
// the trainer pods with a projected token of their TrainJob's audience.
type KubeStatus struct {
	// Listen is the address the endpoint listens on.
	Listen string
	// Service, Namespace and Port name the agent's Service on the spoke
	// that leads to Listen.
	Service, Namespace string
	Port               int32
	// AgentLabels select the agent's pods: the tenant namespaces' egress
	// exception lets their pods reach these, on Port, and nothing else.
	AgentLabels map[string]string
	// StateDir keeps the endpoint's CA (a new one after a restart is
	// published again to every tenant namespace it serves).
	StateDir string
	// CAConfigMap (DefaultStatusCAConfigMap).
	CAConfigMap string
	// Pod is this replica's pod in Namespace; when set, the elected
	// replica's pod carries LabelStatusLeader, which the Service selects.
	Pod string
}

// setupKubeStatus adds the endpoint to mgr, points opts' reports at it and
// returns what the backend gives tenant namespaces and trainer pods.
func setupKubeStatus(mgr ctrl.Manager, spokeCfg *rest.Config, target string, s *KubeStatus, opts *Options) (*kubework.StatusAccess, error) {
	if s.Service == "" || s.Namespace == "" || s.Port == 0 || len(s.AgentLabels) == 0 {
		// Without labels the egress exception would open every pod of
		// the agent namespace.
		return nil, fmt.Errorf("status endpoint: the agent's Service, namespace, port and pod labels are required")
	}
	if s.CAConfigMap == "" {
		s.CAConfigMap = DefaultStatusCAConfigMap
	}
	// TokenReviews and the pod a token is bound to are read live.
	spoke, err := client.New(spokeCfg, client.Options{Scheme: SpokeScheme()})
	if err != nil {
		return nil, err
	}
	url := fmt.Sprintf("https://%s.%s.svc:%d", s.Service, s.Namespace, s.Port)
	reports := statusapi.NewReports(opts.ProgressInterval)
	ep, err := statusapi.NewEndpoint(statusapi.EndpointOptions{Listen: s.Listen, URL: url, StateDir: s.StateDir,
		Auth: statusapi.NewCachedAuth(statusapi.TokenReviewAuth{Spoke: spoke, Hub: mgr.GetClient()})}, target, mgr.GetCache(), reports, ctrl.Log.WithName("status-api"))
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(ep); err != nil {
		return nil, err
	}
	if s.Pod != "" {
		if err := addStatusLeaderLabel(mgr, spokeCfg, s.Namespace, s.Pod); err != nil {
			return nil, err
		}
	}
	opts.Progress = reports
	return &kubework.StatusAccess{Endpoint: kubework.StatusEndpoint{BaseURL: url, CAConfigMap: s.CAConfigMap}, CA: ep.CAPEM(),
		AgentNamespace: s.Namespace, AgentLabels: s.AgentLabels, Port: s.Port}, nil
}

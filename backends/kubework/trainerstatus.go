package kubework

import (
	"context"
	"fmt"

	"github.com/kubeflow/trainer/v2/pkg/statusserver"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/backends"
)

// What Trainer v2.3's TrainJobStatus plugin gives a trainer pod, under the
// same names, so code written for Trainer reports unchanged (the plugin's
// own constants are not exported).
const (
	EnvTrainerServerURL    = "KUBEFLOW_TRAINER_SERVER_URL"
	EnvTrainerServerCACert = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
	EnvTrainerServerToken  = "KUBEFLOW_TRAINER_SERVER_TOKEN"
	TrainerStatusMountPath = "/var/run/secrets/kubeflow/trainer"
	TrainerStatusVolume    = "kubeflow-trainer-token"
	// trainerTokenSeconds is the projected token's life; the kubelet
	// renews it before it ends.
	trainerTokenSeconds = 3600
	caKey               = "ca.crt"
	tokenFile           = "token"
)

// StatusEndpoint is where a spoke's trainer pods report progress: the
// agent's Service, whose CA each tenant namespace holds in a ConfigMap.
type StatusEndpoint struct {
	// BaseURL is https://<service>.<agent namespace>.svc:<port>.
	BaseURL string
	// CAConfigMap is the ConfigMap in each tenant namespace with the CA
	// under "ca.crt".
	CAConfigMap string
}

// WithTrainerStatus gives every container of spec Trainer's three
// variables and its token volume for the hub TrainJob ns/name: a projected
// service-account token with that job's audience and the agent's CA, as
// Trainer's plugin does, with the agent's endpoint in place of Trainer's
// controller. Values a tenant set under those names are replaced.
func WithTrainerStatus(spec *corev1.PodSpec, ep StatusEndpoint, ns, name string) {
	env := []corev1.EnvVar{
		{Name: EnvTrainerServerURL, Value: ep.BaseURL + statusserver.StatusUrl(ns, name)},
		{Name: EnvTrainerServerCACert, Value: TrainerStatusMountPath + "/" + caKey},
		{Name: EnvTrainerServerToken, Value: TrainerStatusMountPath + "/" + tokenFile},
	}
	mount := corev1.VolumeMount{Name: TrainerStatusVolume, MountPath: TrainerStatusMountPath, ReadOnly: true}
	if spec.ServiceAccountName == "" {
		// A projected token needs a named account; "default" is what the
		// API server's ServiceAccount admission would name, where it runs.
		spec.ServiceAccountName = "default"
	}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		for _, e := range env {
			c.Env = upsert(c.Env, e, func(x corev1.EnvVar) string { return x.Name })
		}
		c.VolumeMounts = upsert(c.VolumeMounts, mount, func(x corev1.VolumeMount) string { return x.Name })
	}
	spec.Volumes = upsert(spec.Volumes, corev1.Volume{Name: TrainerStatusVolume, VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				Audience: statusserver.TokenAudience(ns, name), ExpirationSeconds: ptr.To[int64](trainerTokenSeconds), Path: tokenFile,
			}},
			{ConfigMap: &corev1.ConfigMapProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: ep.CAConfigMap},
				Items:                []corev1.KeyToPath{{Key: caKey, Path: caKey}},
			}},
		}},
	}}, func(x corev1.Volume) string { return x.Name })
}

// upsert replaces the item of list with v's key, or appends v.
func upsert[T any](list []T, v T, key func(T) string) []T {
	for i := range list {
		if key(list[i]) == key(v) {
			list[i] = v
			return list
		}
	}
	return append(list, v)
}

// PolicyAllowStatus is the NetworkPolicy that lets a tenant namespace's
// pods reach the agent's status endpoint.
const PolicyAllowStatus = "trainyard-allow-status"

// StatusEgressPolicy lets every pod of tenant namespace ns reach the agent
// pods (agentLabels in agentNamespace) on port, over TCP, and nothing else:
// the default-deny policy keeps the rest closed.
func StatusEgressPolicy(ns, agentNamespace string, agentLabels map[string]string, port int32) *networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	p := intstr.FromInt32(port)
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: PolicyAllowStatus, Namespace: ns,
			Labels: map[string]string{backends.LabelManagedBy: backends.ManagedByValue}},
		Spec: networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: agentNamespace}},
					PodSelector:       &metav1.LabelSelector{MatchLabels: agentLabels},
				}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p}},
			}},
		},
	}
}

// StatusAccess is what each tenant namespace gets so its trainer pods can
// report to the agent: the agent's CA in a ConfigMap (Endpoint.CAConfigMap)
// and an egress exception to the agent's pods on Port.
type StatusAccess struct {
	Endpoint       StatusEndpoint
	CA             []byte
	AgentNamespace string
	AgentLabels    map[string]string
	Port           int32
}

// CAConfigMap is the ConfigMap of ns that holds the agent's CA.
func (a *StatusAccess) CAConfigMap(ns string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: a.Endpoint.CAConfigMap, Namespace: ns,
			Labels: map[string]string{backends.LabelManagedBy: backends.ManagedByValue}},
		Data: map[string]string{caKey: string(a.CA)},
	}
}

// ensureStatusAccess creates or refreshes ns's CA ConfigMap (a restarted
// agent may serve under a new CA: the kubelet updates the mounted copy)
// and creates its egress exception.
func ensureStatusAccess(ctx context.Context, c client.Client, reader client.Reader, a *StatusAccess, ns string) error {
	want := a.CAConfigMap(ns)
	var have corev1.ConfigMap
	switch err := reader.Get(ctx, client.ObjectKeyFromObject(want), &have); {
	case apierrors.IsNotFound(err):
		if err := c.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create configmap %s/%s: %w", ns, want.Name, err)
		}
	case err != nil:
		return fmt.Errorf("get configmap %s/%s: %w", ns, want.Name, err)
	case have.Data[caKey] != want.Data[caKey]:
		have.Data = want.Data
		if err := c.Update(ctx, &have); err != nil {
			return fmt.Errorf("update configmap %s/%s: %w", ns, want.Name, err)
		}
	}
	return ensurePolicy(ctx, c, reader, StatusEgressPolicy(ns, a.AgentNamespace, a.AgentLabels, a.Port))
}

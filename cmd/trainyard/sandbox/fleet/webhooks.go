package fleet

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// webhookSet is the admission webhook configurations of one manager binary.
// envtest installs them pointing at a local URL with its own CA, and the
// manager serves them with the certificates envtest wrote.
type webhookSet struct {
	mutating   []*admissionv1.MutatingWebhookConfiguration
	validating []*admissionv1.ValidatingWebhookConfiguration
}

// loadWebhooks reads a controller-gen webhook manifest, renames the
// configurations after component so two managers never collide, and keeps
// only the webhooks for which keep returns true.
func loadWebhooks(path, component string, keep func(name string) bool) (*webhookSet, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	set := &webhookSet{}
	dec := utilyaml.NewDocumentDecoder(io.NopCloser(bytes.NewReader(raw)))
	defer dec.Close()
	buf := make([]byte, len(raw)+1)
	for {
		n, err := dec.Read(buf)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		doc := buf[:n]
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		switch meta.Kind {
		case "MutatingWebhookConfiguration":
			c := &admissionv1.MutatingWebhookConfiguration{}
			if err := yaml.Unmarshal(doc, c); err != nil {
				return nil, err
			}
			c.Name = component + "-mutating"
			c.Webhooks = filterWebhooks(c.Webhooks, func(w admissionv1.MutatingWebhook) bool { return keep(w.Name) })
			set.mutating = append(set.mutating, c)
		case "ValidatingWebhookConfiguration":
			c := &admissionv1.ValidatingWebhookConfiguration{}
			if err := yaml.Unmarshal(doc, c); err != nil {
				return nil, err
			}
			c.Name = component + "-validating"
			c.Webhooks = filterWebhooks(c.Webhooks, func(w admissionv1.ValidatingWebhook) bool { return keep(w.Name) })
			set.validating = append(set.validating, c)
		}
	}
	return set, nil
}

// filterWebhooks keeps the webhooks keep accepts; the mutating and
// validating kinds are different types with the same Name field.
func filterWebhooks[W any](ws []W, keep func(W) bool) []W {
	var kept []W
	for _, w := range ws {
		if keep(w) {
			kept = append(kept, w)
		}
	}
	return kept
}

// jobSetWebhooks are JobSet's webhooks as its kustomize overlay ships them:
// the pod webhooks only see pods that belong to a JobSet.
func jobSetWebhooks() (*webhookSet, error) {
	dir, err := ModuleDir("sigs.k8s.io/jobset")
	if err != nil {
		return nil, err
	}
	set, err := loadWebhooks(filepath.Join(dir, "config/components/webhook/manifests.yaml"), "jobset",
		func(string) bool { return true })
	if err != nil {
		return nil, err
	}
	set.onlyPodsLabelled("jobset.sigs.k8s.io/jobset-name")
	return set, nil
}

// onlyPodsLabelled limits the set's pod webhooks (kubebuilder's mpod and
// vpod) to pods carrying the label key, so a manager that is briefly down
// blocks only its own pods.
func (s *webhookSet) onlyPodsLabelled(key string) {
	sel := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: key, Operator: metav1.LabelSelectorOpExists,
	}}}
	for _, c := range s.mutating {
		for i := range c.Webhooks {
			if c.Webhooks[i].Name == "mpod.kb.io" {
				c.Webhooks[i].ObjectSelector = sel
			}
		}
	}
	for _, c := range s.validating {
		for i := range c.Webhooks {
			if c.Webhooks[i].Name == "vpod.kb.io" {
				c.Webhooks[i].ObjectSelector = sel
			}
		}
	}
}

// kueueHubWebhooks are the Kueue webhooks a trainyard hub needs: Kueue's own
// objects and the job kinds users submit there. Webhooks for pods and other
// integrations are left out: the hub runs no pods, and a webhook whose
// server is briefly down would block unrelated writes. TrainJob's is left
// out too: TrainJob is an external framework served by the hub
// (hub/kueuejob), so Kueue's TrainJob webhook would only allow.
func kueueHubWebhooks() (*webhookSet, error) {
	dir, err := ModuleDir("sigs.k8s.io/kueue")
	if err != nil {
		return nil, err
	}
	keep := map[string]bool{
		"clusterqueue": true, "cohort": true, "resourceflavor": true, "workload": true,
		"jobset": true, "job": true,
	}
	return loadWebhooks(filepath.Join(dir, "config/components/webhook/manifests.yaml"), "kueue",
		func(name string) bool {
			// Names are "m" or "v" followed by the kind: mworkload.kb.io.
			kind := strings.TrimSuffix(name, ".kb.io")
			return len(kind) > 1 && keep[kind[1:]]
		})
}

// lwsWebhooks are LeaderWorkerSet's webhook configurations. The pod
// webhooks, which give LWS pods their worker index and leader address, see
// only LWS pods.
func lwsWebhooks() (*webhookSet, error) {
	dir, err := ModuleDir("sigs.k8s.io/lws")
	if err != nil {
		return nil, err
	}
	set, err := loadWebhooks(filepath.Join(dir, "config/webhook/manifests.yaml"), "lws", func(string) bool { return true })
	if err != nil {
		return nil, err
	}
	set.onlyPodsLabelled("leaderworkerset.sigs.k8s.io/name")
	return set, nil
}

// direct returns the set's configurations served at base (https://host:port)
// with the CA caBundle, for a manager that does not serve envtest's endpoint.
func (s *webhookSet) direct(base string, caBundle []byte) []client.Object {
	point := func(cc *admissionv1.WebhookClientConfig) {
		url := base + ptr.Deref(cc.Service.Path, "/")
		*cc = admissionv1.WebhookClientConfig{URL: &url, CABundle: caBundle}
	}
	var out []client.Object
	for _, c := range s.mutating {
		for i := range c.Webhooks {
			point(&c.Webhooks[i].ClientConfig)
		}
		out = append(out, c)
	}
	for _, c := range s.validating {
		for i := range c.Webhooks {
			point(&c.Webhooks[i].ClientConfig)
		}
		out = append(out, c)
	}
	return out
}

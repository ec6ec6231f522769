package kubework

import (
	"sync"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// Settings are what a Kubernetes Target's spec says about its tenants and
// an agent applies without a restart: the pod policy (podSecurity,
// allowedPodFields, images) and the egress allowance (networkPolicy.egress). The
// namespace prefix and the backend are fixed for the agent's life.
type Settings struct {
	Policy PodPolicy
	Egress []v1alpha1.EgressRule
}

// SettingsOf are the settings of a Kubernetes target's spec.
func SettingsOf(spec *v1alpha1.TargetSpec) Settings {
	s := Settings{Policy: PolicyOf(spec)}
	if k := spec.Kubernetes; k != nil && k.NetworkPolicy != nil {
		s.Egress = k.NetworkPolicy.Egress
	}
	return s
}

// LivePolicy is a backend's current pod policy, replaced when its Target
// changes and read at each render.
type LivePolicy struct {
	mu sync.RWMutex
	p  PodPolicy
}

// NewLivePolicy starts at p.
func NewLivePolicy(p PodPolicy) *LivePolicy { return &LivePolicy{p: p} }

// Load is the current policy.
func (l *LivePolicy) Load() PodPolicy {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.p
}

// Store replaces the policy.
func (l *LivePolicy) Store(p PodPolicy) {
	l.mu.Lock()
	l.p = p
	l.mu.Unlock()
}

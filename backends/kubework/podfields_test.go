package kubework

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// podSpecFields says, for every field of corev1.PodSpec, how the pod policy
// treats it: "checked" fields have a refusal case below (or in the other
// policy tests); every other entry says why the field reaches nothing but
// the job's own pods. A Kubernetes upgrade that adds a field fails
// TestEveryPodFieldIsJudged until someone decides which it is.
var podSpecFields = map[string]string{
	"Volumes":                       "checked",
	"InitContainers":                "checked",
	"Containers":                    "checked",
	"EphemeralContainers":           "checked",
	"TerminationGracePeriodSeconds": "checked",
	"NodeSelector":                  "checked",
	"ServiceAccountName":            "checked",
	"DeprecatedServiceAccount":      "checked",
	"NodeName":                      "checked",
	"HostNetwork":                   "checked",
	"HostPID":                       "checked",
	"HostIPC":                       "checked",
	"SecurityContext":               "checked", // Pod Security at the Target's level
	"ImagePullSecrets":              "checked",
	"Affinity":                      "checked",
	"SchedulerName":                 "checked",
	"Tolerations":                   "checked",
	"PriorityClassName":             "checked",
	"Priority":                      "checked",
	"RuntimeClassName":              "checked",
	"TopologySpreadConstraints":     "checked",
	"SchedulingGates":               "checked",
	"ResourceClaims":                "checked",
	"SchedulingGroup":               "checked",
	"HostUsers":                     "own pods: true is the default; false only isolates the pods more",
	"RestartPolicy":                 "own pods: how the job's own containers restart",
	"ActiveDeadlineSeconds":         "own pods: can only end the job's pods sooner",
	"DNSPolicy":                     "own pods: name resolution inside the pod; egress is the namespace policy's",
	"DNSConfig":                     "own pods: name resolution inside the pod; egress is the namespace policy's",
	"AutomountServiceAccountToken":  "own pods: the ServiceAccount is checked; not mounting its token gives less",
	"ShareProcessNamespace":         "own pods: shares processes among the pod's own containers",
	"Hostname":                      "own pods: the pod's own hostname",
	"Subdomain":                     "own pods: the pod's own DNS name, within its namespace",
	"HostnameOverride":              "own pods: the pod's own hostname",
	"SetHostnameAsFQDN":             "own pods: the pod's own hostname",
	"HostAliases":                   "own pods: entries in the pod's own /etc/hosts",
	"ReadinessGates":                "own pods: readiness of the job's pods, which no Service of another tenant selects",
	"EnableServiceLinks":            "own pods: environment of Services in the job's own namespace",
	"PreemptionPolicy":              "own pods: Never preempts less; the spoke's PriorityClass admission refuses a mismatch with the class",
	"Overhead":                      "own pods: set by RuntimeClass admission, which refuses a value that differs from the class",
	"OS":                            "own pods: a wrong OS only keeps the job's own pods from running (quota: see Resources)",
	"Resources":                     "own pods: pod-level requests are counted in the Workload's pod sets by Kueue like container requests",
}

func TestEveryPodFieldIsJudged(t *testing.T) {
	typ := reflect.TypeOf(corev1.PodSpec{})
	seen := map[string]bool{}
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		seen[name] = true
		if _, ok := podSpecFields[name]; !ok {
			t.Errorf("PodSpec.%s is neither checked by the pod policy nor listed as reaching only the job's own pods", name)
		}
	}
	for name := range podSpecFields {
		if !seen[name] {
			t.Errorf("podSpecFields lists %s, which PodSpec no longer has", name)
		}
	}
}

func TestPodPolicyRefusesPodFields(t *testing.T) {
	cases := map[string]struct {
		edit    func(*corev1.PodSpec)
		policy  PodPolicy
		wantErr string
	}{
		"a priority class": {
			edit:    func(s *corev1.PodSpec) { s.PriorityClassName = "system-node-critical" },
			wantErr: `priorityClassName "system-node-critical" is not allowed on this target (allowedPodFields.priorityClassNames)`,
		},
		"a priority class not listed": {
			policy:  PodPolicy{Allowed: v1alpha1.AllowedPodFields{PriorityClassNames: []string{"batch-low"}}},
			edit:    func(s *corev1.PodSpec) { s.PriorityClassName = "batch-high" },
			wantErr: `priorityClassName "batch-high" is not allowed`,
		},
		"a priority value": {
			edit:    func(s *corev1.PodSpec) { s.Priority = ptr.To[int32](2000001000) },
			wantErr: "priority is set by the spoke from priorityClassName",
		},
		"a runtime class": {
			edit:    func(s *corev1.PodSpec) { s.RuntimeClassName = ptr.To("runc-unconfined") },
			wantErr: `runtimeClassName "runc-unconfined" is not allowed on this target (allowedPodFields.runtimeClassNames)`,
		},
		"another job's pull secret": {
			edit:    func(s *corev1.PodSpec) { s.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "team-b-registry"}} },
			wantErr: `imagePullSecrets: Secret "team-b-registry" was not made for this job`,
		},
		"a resource claim": {
			edit: func(s *corev1.PodSpec) {
				s.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To("eight-gpus")}}
			},
			wantErr: "resourceClaims (gpus) are not allowed",
		},
		"a topology spread": {
			edit: func(s *corev1.PodSpec) {
				s.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "example.com/rack", WhenUnsatisfiable: corev1.DoNotSchedule}}
			},
			wantErr: "topologySpreadConstraints are not allowed on this target (allowedPodFields.affinity)",
		},
		"a topology spread on a key not listed": {
			policy: PodPolicy{Allowed: v1alpha1.AllowedPodFields{Affinity: true}},
			edit: func(s *corev1.PodSpec) {
				s.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "example.com/rack", WhenUnsatisfiable: corev1.DoNotSchedule}}
			},
			wantErr: `topologySpreadConstraints: topology key "example.com/rack" is not allowed`,
		},
		"a scheduling group": {
			edit:    func(s *corev1.PodSpec) { s.SchedulingGroup = &corev1.PodSchedulingGroup{} },
			wantErr: "schedulingGroup is not allowed",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := tc.policy.Check("replicated job node", &metav1.ObjectMeta{}, pod(tc.edit), own)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Check = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestPodPolicyAllowsListedPodFields(t *testing.T) {
	allowed := PodPolicy{Allowed: v1alpha1.AllowedPodFields{
		PriorityClassNames: []string{"batch-low"}, RuntimeClassNames: []string{"nvidia"},
		Affinity: true, NodeSelectorKeys: []string{"example.com/rack"},
	}}
	cases := map[string]struct {
		policy PodPolicy
		edit   func(*corev1.PodSpec)
	}{
		"a listed priority class": {policy: allowed, edit: func(s *corev1.PodSpec) { s.PriorityClassName = "batch-low" }},
		"a listed runtime class":  {policy: allowed, edit: func(s *corev1.PodSpec) { s.RuntimeClassName = ptr.To("nvidia") }},
		"the job's own pull secret": {
			edit: func(s *corev1.PodSpec) {
				s.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "job-mpi-ssh-auth"}}
			},
		},
		"a spread on a listed key": {policy: allowed, edit: func(s *corev1.PodSpec) {
			s.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "example.com/rack", WhenUnsatisfiable: corev1.DoNotSchedule}}
		}},
		"fields that reach only the job's own pods": {edit: func(s *corev1.PodSpec) {
			s.HostAliases = []corev1.HostAlias{{IP: "10.0.0.1", Hostnames: []string{"store"}}}
			s.DNSPolicy = corev1.DNSDefault
			s.ActiveDeadlineSeconds = ptr.To[int64](3600)
			s.EnableServiceLinks = ptr.To(false)
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if err := tc.policy.Check("replicated job node", &metav1.ObjectMeta{}, pod(tc.edit), own); err != nil {
				t.Fatalf("Check = %v, want nil", err)
			}
		})
	}
}

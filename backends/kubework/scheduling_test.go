package kubework

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

const (
	controlPlane = "node-role.kubernetes.io/control-plane"
	dedicated    = "example.com/dedicated"
	gpuModel     = "nvidia.com/gpu.product"
)

// site is a Target whose administrator lets tenants onto the dedicated
// training nodes, select by GPU model, use affinity and one gate.
var site = v1alpha1.AllowedPodFields{TolerationKeys: []string{dedicated}, NodeSelectorKeys: []string{gpuModel},
	Affinity: true, SchedulingGates: []string{"example.com/quota-check"}}

func nodeAffinity(terms ...corev1.NodeSelectorTerm) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}
}

func onKey(key string) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpExists}}}
}

// TestPodPolicyScheduling: where a pod may run is the Target's to say. By
// default no toleration, node selection, affinity or scheduling gate is
// allowed, so no tenant pod lands on the control plane or a reserved node;
// what a Target allows passes; every refusal names the field and what
// would allow it.
func TestPodPolicyScheduling(t *testing.T) {
	cases := map[string]struct {
		allowed v1alpha1.AllowedPodFields
		edit    func(*corev1.PodSpec)
		want    []string
	}{
		"nothing set, default Target": {},
		"control-plane toleration, default Target": {
			edit: func(s *corev1.PodSpec) {
				s.Tolerations = []corev1.Toleration{{Key: controlPlane, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
			},
			want: []string{`tolerations: taint key "node-role.kubernetes.io/control-plane" is not allowed on this target (allowedPodFields.tolerationKeys)`},
		},
		"control-plane toleration where others are allowed": {
			allowed: site,
			edit: func(s *corev1.PodSpec) {
				s.Tolerations = []corev1.Toleration{{Key: dedicated, Operator: corev1.TolerationOpExists}, {Key: controlPlane, Operator: corev1.TolerationOpExists}}
			},
			want: []string{`tolerations: taint key "node-role.kubernetes.io/control-plane" is not allowed on this target (allowedPodFields.tolerationKeys)`},
		},
		"a toleration of every taint": {
			allowed: site,
			edit:    func(s *corev1.PodSpec) { s.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}} },
			want:    []string{"tolerations: a toleration without a key tolerates every taint and is not allowed on this target"},
		},
		"an allowed toleration": {
			allowed: site,
			edit: func(s *corev1.PodSpec) {
				s.Tolerations = []corev1.Toleration{{Key: dedicated, Operator: corev1.TolerationOpEqual, Value: "training", Effect: corev1.TaintEffectNoSchedule}}
			},
		},
		"nodeSelector, default Target": {
			edit: func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{gpuModel: "H100", "zone": "a"} },
			want: []string{`nodeSelector: node label key "nvidia.com/gpu.product" is not allowed on this target (allowedPodFields.nodeSelectorKeys)`,
				`nodeSelector: node label key "zone" is not allowed on this target (allowedPodFields.nodeSelectorKeys)`},
		},
		"an allowed nodeSelector key": {
			allowed: site,
			edit:    func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{gpuModel: "H100"} },
		},
		"affinity, default Target": {
			edit: func(s *corev1.PodSpec) { s.Affinity = nodeAffinity(onKey(gpuModel)) },
			want: []string{"affinity is not allowed on this target (allowedPodFields.affinity)"},
		},
		"pod anti-affinity, default Target": {
			edit: func(s *corev1.PodSpec) {
				s.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{}}
			},
			want: []string{"affinity is not allowed on this target (allowedPodFields.affinity)"},
		},
		"an empty affinity is none": {edit: func(s *corev1.PodSpec) { s.Affinity = &corev1.Affinity{} }},
		"node affinity on allowed keys": {
			allowed: site,
			edit: func(s *corev1.PodSpec) {
				s.Affinity = nodeAffinity(onKey(gpuModel))
				s.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution = []corev1.PreferredSchedulingTerm{{Weight: 1, Preference: onKey(gpuModel)}}
			},
		},
		"node affinity onto the control plane, required and preferred": {
			allowed: site,
			edit: func(s *corev1.PodSpec) {
				s.Affinity = nodeAffinity(onKey(controlPlane))
				s.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution = []corev1.PreferredSchedulingTerm{{Weight: 1, Preference: onKey(controlPlane)}}
			},
			want: []string{`affinity: node label key "node-role.kubernetes.io/control-plane" is not allowed on this target (allowedPodFields.nodeSelectorKeys)`},
		},
		"node affinity by node name": {
			allowed: site,
			edit: func(s *corev1.PodSpec) {
				s.Affinity = nodeAffinity(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{
					{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"cp-0"}}}})
			},
			want: []string{`affinity: node affinity by field "metadata.name" (matchFields) is not allowed: it picks nodes by name`},
		},
		"a gate, default Target": {
			edit: func(s *corev1.PodSpec) {
				s.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/never-removed"}}
			},
			want: []string{`schedulingGates: gate "example.com/never-removed" is not allowed on this target (allowedPodFields.schedulingGates)`},
		},
		"an allowed gate": {
			allowed: site,
			edit: func(s *corev1.PodSpec) {
				s.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/quota-check"}}
			},
		},
		"nodeName, whatever the Target allows": {
			allowed: site,
			edit:    func(s *corev1.PodSpec) { s.NodeName = "cp-0" },
			want:    []string{`nodeName "cp-0" is not allowed: the spoke's scheduler places pods`},
		},
		"another scheduler": {
			allowed: site,
			edit:    func(s *corev1.PodSpec) { s.SchedulerName = "my-scheduler" },
			want:    []string{`schedulerName "my-scheduler" is not allowed: the spoke's default-scheduler places pods`},
		},
		"the default scheduler named": {edit: func(s *corev1.PodSpec) { s.SchedulerName = corev1.DefaultSchedulerName }},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := PodPolicy{Allowed: tc.allowed}
			got := p.checkScheduling(pod(tc.edit))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("refusals (-want +got):\n%s", diff)
			}
			// Check says the same, naming where.
			err := p.Check("replicated job node", &metav1.ObjectMeta{}, pod(tc.edit), own)
			if (err == nil) != (len(tc.want) == 0) {
				t.Errorf("Check = %v, want refusals %q", err, tc.want)
			}
		})
	}
}

package kubework

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// pod is a pod spec that passes Pod Security baseline and references the
// job's own companions only; edit changes it for one case.
func pod(edit func(*corev1.PodSpec)) *corev1.PodSpec {
	spec := &corev1.PodSpec{
		Containers: []corev1.Container{{Name: "node", Image: "pytorch/pytorch",
			VolumeMounts: []corev1.VolumeMount{{Name: "keys", MountPath: "/root/.ssh"}}}},
		Volumes: []corev1.Volume{
			{Name: "keys", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "job-mpi-ssh-auth"}}},
			{Name: "hostfile", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "job-mpi-hostfile"}}}},
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
	}
	if edit != nil {
		edit(spec)
	}
	return spec
}

var own = Own{Secrets: []string{"job-mpi-ssh-auth"}, ConfigMaps: []string{"job-mpi-hostfile"}}

func secCtx(sc *corev1.SecurityContext) func(*corev1.PodSpec) {
	return func(s *corev1.PodSpec) { s.Containers[0].SecurityContext = sc }
}

func TestPodPolicyRefuses(t *testing.T) {
	hostPath := corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}
	cases := map[string]struct {
		edit    func(*corev1.PodSpec)
		wantErr string
	}{
		"hostPath volume": {
			edit:    func(s *corev1.PodSpec) { s.Volumes = append(s.Volumes, hostPath) },
			wantErr: `volume "host" of type hostPath is not allowed on this target`,
		},
		"nfs volume": {
			edit: func(s *corev1.PodSpec) {
				s.Volumes = append(s.Volumes, corev1.Volume{Name: "n", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "x", Path: "/"}}})
			},
			wantErr: `volume "n" of type nfs is not allowed`,
		},
		"privileged": {
			edit:    secCtx(&corev1.SecurityContext{Privileged: ptr.To(true)}),
			wantErr: `container "node": privileged is not allowed on this target`,
		},
		"allowPrivilegeEscalation": {
			edit:    secCtx(&corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(true)}),
			wantErr: `container "node": allowPrivilegeEscalation is not allowed`,
		},
		"added capability": {
			edit:    secCtx(&corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}}),
			wantErr: `container "node": capability SYS_ADMIN is not allowed`,
		},
		"hostNetwork":    {edit: func(s *corev1.PodSpec) { s.HostNetwork = true }, wantErr: "hostNetwork is not allowed"},
		"hostPID":        {edit: func(s *corev1.PodSpec) { s.HostPID = true }, wantErr: "hostPID is not allowed"},
		"hostIPC":        {edit: func(s *corev1.PodSpec) { s.HostIPC = true }, wantErr: "hostIPC is not allowed"},
		"serviceAccount": {edit: func(s *corev1.PodSpec) { s.ServiceAccountName = "admin" }, wantErr: `serviceAccountName "admin" is not allowed`},
		"another job's Secret": {
			edit:    func(s *corev1.PodSpec) { s.Volumes[0].Secret.SecretName = "other-mpi-ssh-auth" },
			wantErr: `volume "keys" mounts Secret "other-mpi-ssh-auth", which was not made for this job`,
		},
		"another job's hostfile": {
			edit:    func(s *corev1.PodSpec) { s.Volumes[1].ConfigMap.Name = "other-mpi-hostfile" },
			wantErr: `mounts ConfigMap "other-mpi-hostfile"`,
		},
		"projected Secret": {
			edit: func(s *corev1.PodSpec) {
				s.Volumes = append(s.Volumes, corev1.Volume{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
					Sources: []corev1.VolumeProjection{{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "other-mpi-ssh-auth"}}}}}}})
			},
			wantErr: `volume "p" projects Secret "other-mpi-ssh-auth"`,
		},
		"env from a Secret": {
			edit: func(s *corev1.PodSpec) {
				s.InitContainers = []corev1.Container{{Name: "init", Env: []corev1.EnvVar{{Name: "K", ValueFrom: &corev1.EnvVarSource{
					SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "other-mpi-ssh-auth"}, Key: "ssh-privatekey"}}}}}}
			},
			wantErr: `container "init": env K reads Secret "other-mpi-ssh-auth"`,
		},
		"envFrom a Secret": {
			edit: func(s *corev1.PodSpec) {
				s.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}}}
			},
			wantErr: `envFrom reads Secret "db"`,
		},
		"host port (Pod Security baseline)": {
			edit: func(s *corev1.PodSpec) {
				s.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 22, HostPort: 22}}
			},
			wantErr: `violates Pod Security "baseline": hostPort`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := PodPolicy{}.Check("replicated job node", &metav1.ObjectMeta{}, pod(tc.edit), own)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Check = %v, want an error containing %q", err, tc.wantErr)
			}
			if !strings.HasPrefix(err.Error(), "pod template of replicated job node: ") {
				t.Errorf("Check = %v, want it to name the replicated job", err)
			}
		})
	}
}

func TestPodPolicyAllows(t *testing.T) {
	hostPath := func(s *corev1.PodSpec) {
		s.Volumes = append(s.Volumes, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data"}}})
	}
	cases := map[string]struct {
		policy PodPolicy
		edit   func(*corev1.PodSpec)
	}{
		"a default pod":                {},
		"the default ServiceAccount":   {edit: func(s *corev1.PodSpec) { s.ServiceAccountName = "default" }},
		"kube-root-ca.crt":             {edit: func(s *corev1.PodSpec) { s.Volumes[1].ConfigMap.Name = "kube-root-ca.crt" }},
		"a baseline capability, drops": {policy: PodPolicy{Allowed: v1alpha1.AllowedPodFields{Capabilities: []string{"NET_BIND_SERVICE"}}}, edit: secCtx(&corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}, Drop: []corev1.Capability{"ALL"}}})},
		"an allowed ServiceAccount": {
			policy: PodPolicy{Allowed: v1alpha1.AllowedPodFields{ServiceAccountNames: []string{"kubeflow-trainer-cache-initializer"}}},
			edit:   func(s *corev1.PodSpec) { s.ServiceAccountName = "kubeflow-trainer-cache-initializer" },
		},
		"hostPath when allowed and Privileged": {
			policy: PodPolicy{Level: v1alpha1.PodSecurityPrivileged, Allowed: v1alpha1.AllowedPodFields{VolumeTypes: []string{"hostPath"}}},
			edit:   hostPath,
		},
		"privileged and hostNetwork when allowed": {
			policy: PodPolicy{Level: v1alpha1.PodSecurityPrivileged, Allowed: v1alpha1.AllowedPodFields{Privileged: true, HostNetwork: true}},
			edit: func(s *corev1.PodSpec) {
				s.HostNetwork = true
				s.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if err := tc.policy.Check("replicated job node", &metav1.ObjectMeta{}, pod(tc.edit), own); err != nil {
				t.Fatalf("Check = %v, want nil", err)
			}
		})
	}
}

// TestPodPolicyLevels: an allowlisted field is still refused by the
// Target's Pod Security level, which the tenant namespaces enforce; and
// Restricted refuses what Kubeflow's root images need.
func TestPodPolicyLevels(t *testing.T) {
	hostPath := pod(func(s *corev1.PodSpec) {
		s.Volumes = append(s.Volumes, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data"}}})
	})
	allowed := v1alpha1.AllowedPodFields{VolumeTypes: []string{"hostPath"}}
	err := PodPolicy{Allowed: allowed}.Check("node", nil, hostPath, own)
	if err == nil || !strings.Contains(err.Error(), `violates Pod Security "baseline": hostPath volumes`) {
		t.Errorf("allowed hostPath under baseline: %v, want the Pod Security refusal", err)
	}
	err = PodPolicy{Level: v1alpha1.PodSecurityRestricted}.Check("node", nil, pod(nil), own)
	if err == nil || !strings.Contains(err.Error(), `violates Pod Security "restricted"`) || !strings.Contains(err.Error(), "runAsNonRoot") {
		t.Errorf("root pod under restricted: %v, want the Pod Security refusal naming runAsNonRoot", err)
	}
	compliant := pod(func(s *corev1.PodSpec) {
		s.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
		s.Containers[0].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	})
	if err := (PodPolicy{Level: v1alpha1.PodSecurityRestricted}).Check("node", nil, compliant, own); err != nil {
		t.Errorf("restricted-compliant pod: %v, want nil", err)
	}
}

func TestTenantNamespace(t *testing.T) {
	long := strings.Repeat("t", 63)
	cases := []struct {
		prefix, tenant, want string
	}{
		{"trainyard-jobs", "team-a", "trainyard-jobs-team-a"},
		{"", "team-a", "trainyard-jobs-team-a"},
		{"j", long, ""},
		{strings.Repeat("p", 40), "team-a", ""},
	}
	seen := map[string]string{}
	for _, tc := range cases {
		got := TenantNamespace(tc.prefix, tc.tenant)
		if tc.want != "" && got != tc.want {
			t.Errorf("TenantNamespace(%q, %q) = %q, want %q", tc.prefix, tc.tenant, got, tc.want)
		}
		if len(got) > 63 || strings.HasSuffix(got, "-") || !IsTenantNamespace(tc.prefix, got) {
			t.Errorf("TenantNamespace(%q, %q) = %q: not a DNS label of the prefix's", tc.prefix, tc.tenant, got)
		}
	}
	// Long tenants that share their first characters stay apart.
	for _, tenant := range []string{long, long[:62] + "u", long[:61] + "-x"} {
		got := TenantNamespace("trainyard-jobs", tenant)
		if other, ok := seen[got]; ok {
			t.Errorf("tenants %q and %q share namespace %q", tenant, other, got)
		}
		seen[got] = tenant
		if len(got) > 63 || !strings.HasPrefix(got, "trainyard-jobs-") {
			t.Errorf("TenantNamespace(%q) = %q", tenant, got)
		}
	}
	if IsTenantNamespace("trainyard-jobs", "kube-system") || !IsTenantNamespace("trainyard-jobs", "trainyard-jobs") {
		t.Error("IsTenantNamespace: want only the prefix and its tenant namespaces")
	}
}

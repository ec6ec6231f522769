package kubework

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	"github.com/trainyard-dev/trainyard/backends"
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
		"termination grace over the default cap": {
			edit:    func(s *corev1.PodSpec) { s.TerminationGracePeriodSeconds = ptr.To[int64](31) },
			wantErr: "terminationGracePeriodSeconds 31 is more than this target allows (maxTerminationGracePeriodSeconds 30)",
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

// capped is a default policy whose grace cap is most seconds.
func capped(most int64) PodPolicy {
	return PodPolicy{Allowed: v1alpha1.AllowedPodFields{MaxTerminationGracePeriodSeconds: ptr.To(most)}}
}

// TestPodPolicyGraceCap: a pod may ask for a termination grace up to the
// Target's cap (30 s, Kubernetes' default, when unset) and no longer,
// whatever set it; the refusal names the value and the cap.
func TestPodPolicyGraceCap(t *testing.T) {
	cases := map[string]struct {
		policy  PodPolicy
		grace   *int64
		wantErr string
	}{
		"unset under the default cap":                 {},
		"at the default cap":                          {grace: ptr.To[int64](30)},
		"over the default cap":                        {grace: ptr.To[int64](600), wantErr: "terminationGracePeriodSeconds 600 is more than this target allows (maxTerminationGracePeriodSeconds 30)"},
		"at a raised cap":                             {policy: capped(600), grace: ptr.To[int64](600)},
		"over a raised cap":                           {policy: capped(600), grace: ptr.To[int64](601), wantErr: "terminationGracePeriodSeconds 601 is more than this target allows (maxTerminationGracePeriodSeconds 600)"},
		"zero under a zero cap":                       {policy: capped(0), grace: ptr.To[int64](0)},
		"one over a zero cap":                         {policy: capped(0), grace: ptr.To[int64](1), wantErr: "terminationGracePeriodSeconds 1 is more than this target allows (maxTerminationGracePeriodSeconds 0)"},
		"unset under a lowered cap (render fills it)": {policy: capped(5)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := tc.policy.Check("replicated job node", &metav1.ObjectMeta{}, pod(func(s *corev1.PodSpec) { s.TerminationGracePeriodSeconds = tc.grace }), own)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Check = %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Check = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestPodPolicyBoundGrace: a pod that sets no grace gets the cap when the
// cap is below the 30 s Kubernetes would give it, and is left alone
// otherwise; a grace the pod sets is never changed (Check judges it).
func TestPodPolicyBoundGrace(t *testing.T) {
	cases := map[string]struct {
		policy PodPolicy
		grace  *int64
		want   *int64
	}{
		"default cap, unset":      {},
		"raised cap, unset":       {policy: capped(600)},
		"lowered cap, unset":      {policy: capped(5), want: ptr.To[int64](5)},
		"zero cap, unset":         {policy: capped(0), want: ptr.To[int64](0)},
		"lowered cap, set higher": {policy: capped(5), grace: ptr.To[int64](20), want: ptr.To[int64](20)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			spec := pod(func(s *corev1.PodSpec) { s.TerminationGracePeriodSeconds = tc.grace })
			tc.policy.BoundGrace(spec)
			if diff := cmp.Diff(tc.want, spec.TerminationGracePeriodSeconds); diff != "" {
				t.Errorf("terminationGracePeriodSeconds (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPodPolicyStopWithin: the cap and backends.StopMargin.
func TestPodPolicyStopWithin(t *testing.T) {
	for _, tc := range []struct {
		policy PodPolicy
		want   time.Duration
	}{{PodPolicy{}, 45 * time.Second}, {capped(0), 15 * time.Second}, {capped(600), 615 * time.Second}} {
		if got := tc.policy.StopWithin(); got != tc.want {
			t.Errorf("StopWithin of %+v = %v, want %v", tc.policy.Allowed, got, tc.want)
		}
	}
}

// TestLivePolicyConcurrent: a backend's StopWithin reads the policy while
// its Target's changes replace it; go test -race finds no race, and the
// last policy stored is the one read.
func TestLivePolicyConcurrent(t *testing.T) {
	l := NewLivePolicy(capped(600))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 100 {
			l.Store(capped(int64(i)))
		}
	}()
	for range 100 {
		if got := l.Load().StopWithin(); got > 615*time.Second {
			t.Fatalf("StopWithin while the policy changes = %v", got)
		}
	}
	wg.Wait()
	if got, want := l.Load().StopWithin(), 99*time.Second+backends.StopMargin; got != want {
		t.Errorf("StopWithin after the last change = %v, want %v", got, want)
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

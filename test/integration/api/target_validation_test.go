package api

import (
	"context"
	"strings"
	"testing"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
)

func TestTargetValidation(t *testing.T) {
	cases := map[string]struct {
		target  *v1alpha1.Target
		wantErr string // "" means the API server accepts it
	}{
		"valid kubernetes target": {
			target: tytesting.MakeKubernetesTarget("k-ok", "gpu-a").Obj(),
		},
		"valid slurm target": {
			target: tytesting.MakeSlurmTarget("s-ok", "hpc", "gpu").
				SlurmAccount(v1alpha1.SlurmAccount{Namespace: "team-a", User: "alice", Account: "ml", QOS: "normal"}).Obj(),
		},
		"kubernetes target without kubernetes block": {
			target:  tytesting.MakeKubernetesTarget("k-noblock", "gpu-a").Kubernetes(nil).Obj(),
			wantErr: "a Kubernetes target sets spec.kubernetes and not spec.slurm",
		},
		"kubernetes target with a slurm block": {
			target: tytesting.MakeKubernetesTarget("k-both", "gpu-a").
				Slurm(tytesting.MakeSlurmTarget("x", "gpu-a", "gpu").Obj().Spec.Slurm).Obj(),
			wantErr: "a Kubernetes target sets spec.kubernetes and not spec.slurm",
		},
		"slurm target without slurm block": {
			target:  tytesting.MakeSlurmTarget("s-noblock", "hpc", "gpu").Slurm(nil).Obj(),
			wantErr: "a Slurm target sets spec.slurm and not spec.kubernetes",
		},
		"unknown type": {
			target:  tytesting.MakeKubernetesTarget("k-type", "gpu-a").Type("Nomad").Obj(),
			wantErr: `spec.type: Unsupported value: "Nomad"`,
		},
		"no flavors": {
			target:  tytesting.MakeKubernetesTarget("k-noflavor", "gpu-a").Flavors().Obj(),
			wantErr: "spec.flavors",
		},
		"flavor not a DNS name": {
			target:  tytesting.MakeKubernetesTarget("k-badflavor", "Bad_Flavor").Obj(),
			wantErr: "spec.flavors[0]",
		},
		"agent namespace not a DNS label": {
			target:  tytesting.MakeKubernetesTarget("k-badns", "gpu-a").AgentNamespace("Not.A.Label").Obj(),
			wantErr: "spec.agent.namespace",
		},
		"slurm auth from a secret": {
			target: tytesting.MakeSlurmTarget("s-auth", "hpc", "gpu").SlurmAuth(&v1alpha1.SlurmAuth{
				Type: v1alpha1.SlurmAuthSigningKey, SecretRef: &v1alpha1.SecretKeyRef{Name: "slurm-jwt", Key: "jwt_hs256.key"}}).Obj(),
		},
		"slurm auth naming a secret and a file": {
			target: tytesting.MakeSlurmTarget("s-auth2", "hpc", "gpu").SlurmAuth(&v1alpha1.SlurmAuth{Type: v1alpha1.SlurmAuthToken,
				File: "/etc/trainyard/token", SecretRef: &v1alpha1.SecretKeyRef{Name: "t", Key: "k"}}).Obj(),
			wantErr: "set exactly one of secretRef and file",
		},
		"slurm auth naming neither": {
			target:  tytesting.MakeSlurmTarget("s-auth3", "hpc", "gpu").SlurmAuth(&v1alpha1.SlurmAuth{Type: v1alpha1.SlurmAuthToken}).Obj(),
			wantErr: "set exactly one of secretRef and file",
		},
		"slurm auth file not absolute": {
			target: tytesting.MakeSlurmTarget("s-auth4", "hpc", "gpu").SlurmAuth(&v1alpha1.SlurmAuth{
				Type: v1alpha1.SlurmAuthSigningKey, File: "key"}).Obj(),
			wantErr: "file must be an absolute path",
		},
		"slurm topology file not absolute": {
			target:  tytesting.MakeSlurmTarget("s-topo", "hpc", "gpu").SlurmTopologyFile("topology.conf").Obj(),
			wantErr: "topologyFile must be an absolute path",
		},
		"slurm endpoint not a URL": {
			target:  tytesting.MakeSlurmTarget("s-url", "hpc", "gpu").SlurmEndpoint("not a url").Obj(),
			wantErr: "endpoint must be an http or https URL",
		},
		"slurm endpoint with another scheme": {
			target:  tytesting.MakeSlurmTarget("s-scheme", "hpc", "gpu").SlurmEndpoint("ftp://slurm:6820").Obj(),
			wantErr: "endpoint must be an http or https URL",
		},
		"slurm partition for a flavor the target does not serve": {
			target:  tytesting.MakeSlurmTarget("s-flavor", "hpc", "gpu").SlurmPartition("other", "cpu").Obj(),
			wantErr: "every spec.slurm.partitions[].flavor must be listed in spec.flavors",
		},
		"slurm partition name with shell characters": {
			target:  tytesting.MakeSlurmTarget("s-shell", "hpc", "gpu;rm -rf /").Obj(),
			wantErr: "spec.slurm.partitions[0].partition",
		},
		"slurm user that is not a Unix user name": {
			target: tytesting.MakeSlurmTarget("s-user", "hpc", "gpu").
				SlurmAccount(v1alpha1.SlurmAccount{Namespace: "team-a", User: "$(id)"}).Obj(),
			wantErr: "spec.slurm.accounts[0].user",
		},
		"slurm namespace mapped twice": {
			target: tytesting.MakeSlurmTarget("s-dup", "hpc", "gpu").
				SlurmAccount(v1alpha1.SlurmAccount{Namespace: "team-a", User: "alice"}).
				SlurmAccount(v1alpha1.SlurmAccount{Namespace: "team-a", User: "bob"}).Obj(),
			wantErr: "Duplicate value",
		},
		"slurm api version not served": {
			target: func() *v1alpha1.Target {
				tg := tytesting.MakeSlurmTarget("s-ver", "hpc", "gpu").Obj()
				tg.Spec.Slurm.APIVersion = "v0.0.38"
				return tg
			}(),
			wantErr: `Unsupported value: "v0.0.38"`,
		},
		"images a spoke allows": {
			target: tytesting.MakeKubernetesTarget("k-images", "gpu-a").AllowedImages("registry.example.org/*", "docker.io/pytorch/pytorch:2.*").Obj(),
		},
		"images a bare-node cluster's host stands for": {
			target: tytesting.MakeSlurmTarget("s-host-images", "hpc", "gpu").HostImages("pytorch/pytorch:*").Obj(),
		},
		"images a container runtime allows": {
			target: func() *v1alpha1.Target {
				tg := tytesting.MakeSlurmTarget("s-oci-images", "hpc", "gpu").AllowedImages("registry.example.org/*").Obj()
				tg.Spec.Slurm.ContainerRuntime = v1alpha1.ContainerRuntimeOCI
				return tg
			}(),
		},
		"allowed images on a bare-node cluster": {
			target:  tytesting.MakeSlurmTarget("s-allowed-bare", "hpc", "gpu").AllowedImages("pytorch/pytorch:*").Obj(),
			wantErr: "spec.images.allowed limits targets that run containers",
		},
		"a host environment on a spoke": {
			target:  tytesting.MakeKubernetesTarget("k-host-images", "gpu-a").HostImages("pytorch/pytorch:*").Obj(),
			wantErr: "spec.images.hostEnvironment is for Slurm targets that run commands on the host",
		},
		"a host environment where a container runtime runs the image": {
			target: func() *v1alpha1.Target {
				tg := tytesting.MakeSlurmTarget("s-host-oci", "hpc", "gpu").HostImages("pytorch/pytorch:*").Obj()
				tg.Spec.Slurm.ContainerRuntime = v1alpha1.ContainerRuntimePyxis
				return tg
			}(),
			wantErr: "spec.images.hostEnvironment is for Slurm targets that run commands on the host",
		},
		"a scheduling allowlist": {
			target: allowing("k-sched-ok", v1alpha1.AllowedPodFields{TolerationKeys: []string{"example.com/dedicated", "training-workload"},
				NodeSelectorKeys: []string{"nvidia.com/gpu.product"}, Affinity: true, SchedulingGates: []string{"example.com/quota-check"}}),
		},
		"a node lifecycle taint among tolerationKeys": {
			target:  allowing("k-sched-lifecycle", v1alpha1.AllowedPodFields{TolerationKeys: []string{"node.kubernetes.io/unreachable"}}),
			wantErr: "tolerationKeys cannot list node.kubernetes.io/ taints",
		},
		"an empty toleration key": {
			target:  allowing("k-sched-empty", v1alpha1.AllowedPodFields{TolerationKeys: []string{""}}),
			wantErr: "spec.kubernetes.allowedPodFields.tolerationKeys[0]",
		},
		"a nodeSelector key that is no label key": {
			target:  allowing("k-sched-badkey", v1alpha1.AllowedPodFields{NodeSelectorKeys: []string{"a b"}}),
			wantErr: "spec.kubernetes.allowedPodFields.nodeSelectorKeys[0]",
		},
		"an image pattern with shell characters": {
			target:  tytesting.MakeKubernetesTarget("k-images-bad", "gpu-a").AllowedImages("$(reboot)").Obj(),
			wantErr: "spec.images.allowed[0]",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := k8sClient.Create(context.Background(), tc.target)
			checkAdmission(t, err, tc.wantErr)
		})
	}
}

func TestTargetDefaults(t *testing.T) {
	ctx := context.Background()
	tg := tytesting.MakeSlurmTarget("s-defaults", "hpc", "gpu").Obj()
	if err := k8sClient.Create(ctx, tg); err != nil {
		t.Fatal(err)
	}
	if tg.Spec.Slurm.APIVersion != v1alpha1.SlurmAPIVersionV0041 || tg.Spec.Slurm.DefaultLauncher != v1alpha1.LauncherTorchrun ||
		tg.Spec.Slurm.ContainerRuntime != v1alpha1.ContainerRuntimeNone {
		t.Errorf("slurm defaults not applied: %+v", tg.Spec.Slurm)
	}
	kt := tytesting.MakeKubernetesTarget("k-defaults", "gpu-a").Obj()
	if err := k8sClient.Create(ctx, kt); err != nil {
		t.Fatal(err)
	}
	if kt.Spec.Kubernetes.Backend != v1alpha1.KubernetesBackendJobSet || kt.Spec.Kubernetes.Namespace != "trainyard-jobs" {
		t.Errorf("kubernetes defaults not applied: %+v", kt.Spec.Kubernetes)
	}
}

func TestTargetTypeIsImmutable(t *testing.T) {
	ctx := context.Background()
	tg := tytesting.MakeKubernetesTarget("k-immutable", "gpu-a").Obj()
	if err := k8sClient.Create(ctx, tg); err != nil {
		t.Fatal(err)
	}
	tg.Spec.Type = v1alpha1.TargetTypeSlurm
	tg.Spec.Kubernetes = nil
	tg.Spec.Slurm = tytesting.MakeSlurmTarget("x", "gpu-a", "gpu").Obj().Spec.Slurm
	checkAdmission(t, k8sClient.Update(ctx, tg), "type is immutable")
}

// checkAdmission asserts that err is nil when wantErr is empty, and otherwise
// that the API server refused the write with a message containing wantErr.
func checkAdmission(t *testing.T, err error, wantErr string) {
	t.Helper()
	switch {
	case wantErr == "" && err != nil:
		t.Fatalf("rejected a valid object: %v", err)
	case wantErr != "" && err == nil:
		t.Fatalf("accepted an invalid object; want an error containing %q", wantErr)
	case wantErr != "" && !strings.Contains(err.Error(), wantErr):
		t.Fatalf("error %q does not contain %q", err.Error(), wantErr)
	}
}

// allowing is a Kubernetes target whose allowedPodFields are allowed.
func allowing(name string, allowed v1alpha1.AllowedPodFields) *v1alpha1.Target {
	tg := tytesting.MakeKubernetesTarget(name, "gpu-a").Obj()
	tg.Spec.Kubernetes.AllowedPodFields = &allowed
	return tg
}

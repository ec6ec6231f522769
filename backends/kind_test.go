package backends

import (
	"testing"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

func TestFor(t *testing.T) {
	kube := func(k *v1alpha1.KubernetesTarget) *v1alpha1.TargetSpec {
		return &v1alpha1.TargetSpec{Type: v1alpha1.TargetTypeKubernetes, Kubernetes: k}
	}
	cases := map[string]struct {
		spec    *v1alpha1.TargetSpec
		want    Kind
		wantErr string
	}{
		"Kubernetes, backend unset":   {spec: kube(&v1alpha1.KubernetesTarget{}), want: KindJobSet},
		"Kubernetes, no spec":         {spec: kube(nil), want: KindJobSet},
		"Kubernetes, JobSet":          {spec: kube(&v1alpha1.KubernetesTarget{Backend: v1alpha1.KubernetesBackendJobSet}), want: KindJobSet},
		"Kubernetes, LeaderWorkerSet": {spec: kube(&v1alpha1.KubernetesTarget{Backend: v1alpha1.KubernetesBackendLeaderWorkerSet}), want: KindLeaderWorkerSet},
		"Kubernetes, unknown backend": {spec: kube(&v1alpha1.KubernetesTarget{Backend: "Deployment"}),
			wantErr: `spec.kubernetes.backend "Deployment" is not JobSet or LeaderWorkerSet`},
		"Slurm":        {spec: &v1alpha1.TargetSpec{Type: v1alpha1.TargetTypeSlurm, Slurm: &v1alpha1.SlurmTarget{}}, want: KindSlurm},
		"unknown type": {spec: &v1alpha1.TargetSpec{Type: "Nomad"}, wantErr: `unknown target type "Nomad"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := For(tc.spec)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("For = %q, %v; want error %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("For = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

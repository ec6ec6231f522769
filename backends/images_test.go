package backends

import (
	"strings"
	"testing"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

func TestImageRuleOf(t *testing.T) {
	images := &v1alpha1.TargetImages{Allowed: []string{"allowed/*"}, HostEnvironment: []string{"host/*"}}
	slurm := func(rt v1alpha1.ContainerRuntime) *v1alpha1.TargetSpec {
		return &v1alpha1.TargetSpec{Type: v1alpha1.TargetTypeSlurm, Images: images, Slurm: &v1alpha1.SlurmTarget{ContainerRuntime: rt}}
	}
	cases := map[string]struct {
		spec     *v1alpha1.TargetSpec
		host     bool
		patterns string
	}{
		"a Kubernetes spoke runs containers":             {spec: &v1alpha1.TargetSpec{Type: v1alpha1.TargetTypeKubernetes, Images: images}, patterns: "allowed/*"},
		"Slurm with OCI runs containers":                 {spec: slurm(v1alpha1.ContainerRuntimeOCI), patterns: "allowed/*"},
		"Slurm with Pyxis runs containers":               {spec: slurm(v1alpha1.ContainerRuntimePyxis), patterns: "allowed/*"},
		"Slurm with None runs on the host":               {spec: slurm(v1alpha1.ContainerRuntimeNone), host: true, patterns: "host/*"},
		"Slurm with the runtime unset (None)":            {spec: slurm(""), host: true, patterns: "host/*"},
		"no images: a spoke runs any":                    {spec: &v1alpha1.TargetSpec{Type: v1alpha1.TargetTypeKubernetes}},
		"no images: a bare-node cluster stands for none": {spec: &v1alpha1.TargetSpec{Type: v1alpha1.TargetTypeSlurm, Slurm: &v1alpha1.SlurmTarget{}}, host: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := ImageRuleOf(tc.spec)
			if r.Host != tc.host || strings.Join(r.Patterns, ",") != tc.patterns {
				t.Errorf("ImageRuleOf = %+v, want host %v, patterns %q", r, tc.host, tc.patterns)
			}
		})
	}
}

func TestImageRuleCheck(t *testing.T) {
	cases := map[string]struct {
		rule  ImageRule
		image string
		want  string // "" runs; else a part of the refusal
	}{
		"any image where containers run":               {image: "pytorch/pytorch:2.7.1"},
		"no image on a bare node":                      {rule: ImageRule{Host: true}},
		"an image on a bare node that stands for none": {rule: ImageRule{Host: true}, image: "pytorch/pytorch:2.7.1", want: `image "pytorch/pytorch:2.7.1" cannot run here: this target runs commands on its nodes' host, with no container runtime, and lists no images`},
		"an image the host stands for":                 {rule: ImageRule{Host: true, Patterns: []string{"pytorch/pytorch:2.*"}}, image: "pytorch/pytorch:2.7.1"},
		"an image the host does not stand for": {rule: ImageRule{Host: true, Patterns: []string{"pytorch/pytorch:2.*"}}, image: "ghcr.io/x/trainer:1",
			want: `image "ghcr.io/x/trainer:1" cannot run here: this target runs commands on its nodes' host, with no container runtime, and its host environment stands only for pytorch/pytorch:2.* (spec.images.hostEnvironment)`},
		"* stands for every image": {rule: ImageRule{Host: true, Patterns: []string{"*"}}, image: "ghcr.io/x/trainer:1"},
		"an allowed registry":      {rule: ImageRule{Patterns: []string{"registry.example.org/*"}}, image: "registry.example.org/team/trainer@sha256:0123"},
		"a registry not allowed": {rule: ImageRule{Patterns: []string{"registry.example.org/*"}}, image: "evil.example.com/registry.example.org/x",
			want: `image "evil.example.com/registry.example.org/x" is not one this target runs (spec.images.allowed: registry.example.org/*)`},
		"a Docker Hub image matches its qualified form":  {rule: ImageRule{Patterns: []string{"docker.io/pytorch/*"}}, image: "pytorch/pytorch:2.7.1"},
		"an official image matches docker.io/library":    {rule: ImageRule{Patterns: []string{"docker.io/library/busybox:*"}}, image: "busybox:1.36"},
		"a registry's image is not Docker Hub's":         {rule: ImageRule{Patterns: []string{"docker.io/*"}}, image: "localhost:5000/x:1", want: "not one this target runs"},
		"an exact pattern is exact":                      {rule: ImageRule{Patterns: []string{"busybox"}}, image: "busybox:1.36", want: "not one this target runs"},
		"stars in the middle":                            {rule: ImageRule{Patterns: []string{"nvcr.io/*/pytorch:*-py3"}}, image: "nvcr.io/nvidia/pytorch:25.01-py3"},
		"stars need their text in order":                 {rule: ImageRule{Patterns: []string{"nvcr.io/*/pytorch:*-py3"}}, image: "nvcr.io/nvidia/jax:25.01-py3", want: "not one this target runs"},
		"a suffix does not overlap what a star consumed": {rule: ImageRule{Patterns: []string{"a*ab"}}, image: "ab", want: "not one this target runs"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := tc.rule.Check(tc.image)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Check(%q) = %v, want nil", tc.image, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Check(%q) = %v, want an error containing %q", tc.image, err, tc.want)
			}
		})
	}
}

package backends

import (
	"fmt"
	"strings"

	"github.com/trainyard-dev/trainyard/api/v1alpha1"
)

// ImageRule is which images a target runs (its spec.images), the one rule
// every backend's render applies to the images a job names, so the hub's
// eligibility check and the agent refuse the same jobs. The zero value is
// a target that runs any image.
type ImageRule struct {
	// Host: the target runs commands on its nodes' host (Slurm without a
	// container runtime); else it runs jobs in their images.
	Host bool
	// Patterns are spec.images.allowed where the target runs containers
	// (empty: any image), spec.images.hostEnvironment where it does not
	// (empty: none).
	Patterns []string
}

// ImageRuleOf is the rule of the target whose spec is s.
func ImageRuleOf(s *v1alpha1.TargetSpec) ImageRule {
	r := ImageRule{Host: !s.RunsContainers()}
	if s.Images != nil {
		r.Patterns = s.Images.Allowed
		if r.Host {
			r.Patterns = s.Images.HostEnvironment
		}
	}
	return r
}

// Check says why a job naming image cannot run under r, or nil. A job that
// names no image is left to the backend: a host runs its command, and a
// container runtime has nothing to run.
func (r ImageRule) Check(image string) error {
	if image == "" || (!r.Host && len(r.Patterns) == 0) || matchesAny(r.Patterns, image) {
		return nil
	}
	if !r.Host {
		return fmt.Errorf("image %q is not one this target runs (spec.images.allowed: %s)", image, strings.Join(r.Patterns, ", "))
	}
	if len(r.Patterns) == 0 {
		return fmt.Errorf("image %q cannot run here: this target runs commands on its nodes' host, with no container runtime, "+
			"and lists no images its host environment stands for (spec.images.hostEnvironment)", image)
	}
	return fmt.Errorf("image %q cannot run here: this target runs commands on its nodes' host, with no container runtime, "+
		"and its host environment stands only for %s (spec.images.hostEnvironment)", image, strings.Join(r.Patterns, ", "))
}

// matchesAny reports whether image, as written or in its fully qualified
// Docker Hub form, matches one of patterns.
func matchesAny(patterns []string, image string) bool {
	full := dockerHubForm(image)
	for _, p := range patterns {
		if globMatch(p, image) || (full != "" && globMatch(p, full)) {
			return true
		}
	}
	return false
}

// dockerHubForm is image with the registry Docker Hub implies written out
// (pytorch/pytorch:2 is docker.io/pytorch/pytorch:2, busybox is
// docker.io/library/busybox), or "" when image names its registry: its
// first component has a dot or a port, or is localhost.
func dockerHubForm(image string) string {
	first, _, ok := strings.Cut(image, "/")
	if !ok {
		return "docker.io/library/" + image
	}
	if strings.ContainsAny(first, ".:") || first == "localhost" {
		return ""
	}
	return "docker.io/" + image
}

// globMatch reports whether s matches pattern, in which * stands for any
// run of characters, / and : included, and every other character for
// itself.
func globMatch(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return len(s) >= len(last) && strings.HasSuffix(s, last)
}

package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoTestCode keeps the shipped CLI free of test infrastructure:
// nothing under test/ or internal/testing, and no test wrappers of Kueue,
// Trainer, JobSet or anyone else (…/pkg/util/testing), may be linked.
func TestLinksNoTestCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 100 {
		t.Fatalf("go list -deps listed only %d packages: %q", len(deps), deps)
	}
	var bad []string
	for _, p := range deps {
		if linksTestCode(p) {
			bad = append(bad, p)
		}
	}
	if len(bad) > 0 {
		t.Errorf("the CLI links test code:\n  %s", strings.Join(bad, "\n  "))
	}
}

func linksTestCode(pkg string) bool {
	const module = "github.com/trainyard-dev/trainyard/"
	return strings.HasPrefix(pkg, module+"test/") || pkg == module+"internal/testing" ||
		strings.HasPrefix(pkg, module+"internal/testing/") ||
		strings.Contains(pkg, "/pkg/util/testing") || strings.HasSuffix(pkg, "/testing/wrappers")
}

func TestLinksTestCodeSeesTestPackages(t *testing.T) {
	for pkg, want := range map[string]bool{
		"github.com/trainyard-dev/trainyard/test/harness/kube":         true,
		"github.com/trainyard-dev/trainyard/internal/testing":          true,
		"sigs.k8s.io/kueue/pkg/util/testing/v1beta2":                   true,
		"github.com/trainyard-dev/trainyard/internal/sandbox/fleet":    false,
		"github.com/trainyard-dev/trainyard/internal/sandbox/testdata": false,
		"k8s.io/client-go/testing":                                     false,
	} {
		if got := linksTestCode(pkg); got != want {
			t.Errorf("linksTestCode(%q) = %v, want %v", pkg, got, want)
		}
	}
}

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
		"github.com/trainyard-dev/trainyard/test/util":                      true,
		"github.com/trainyard-dev/trainyard/internal/testing":               true,
		"sigs.k8s.io/kueue/pkg/util/testing/v1beta2":                        true,
		"github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet":    false,
		"github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/testdata": false,
		"k8s.io/client-go/testing":                                          false,
	} {
		if got := linksTestCode(pkg); got != want {
			t.Errorf("linksTestCode(%q) = %v, want %v", pkg, got, want)
		}
	}
}

// TestInternalImportsNoHubOrSpoke keeps internal/ a ground floor of
// libraries: nothing under it may import, even through another package,
// anything of hub/ or spoke/. A composition root that wires them belongs
// under cmd/ (as the sandbox does, in cmd/trainyard/sandbox).
func TestInternalImportsNoHubOrSpoke(t *testing.T) {
	const module = "github.com/trainyard-dev/trainyard/"
	// Test files count too: -test lists each package's test variants.
	out, err := exec.Command("go", "list", "-deps", "-test", "-f", `{{.ImportPath}}|{{join .Imports "|"}}`, "../../internal/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	imports := map[string][]string{}
	var internal []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(l, "|")
		imports[f[0]] = f[1:]
		if strings.HasPrefix(f[0], module+"internal/") {
			internal = append(internal, f[0])
		}
	}
	if len(internal) < 3 {
		t.Fatalf("go list found only %d packages under internal/: %q", len(internal), internal)
	}
	for _, pkg := range internal {
		if path := pathTo(imports, pkg, isHubOrSpoke, map[string]bool{}); path != nil {
			t.Errorf("%s imports hub or spoke: %s", pkg, strings.Join(path, " -> "))
		}
	}
}

func isHubOrSpoke(pkg string) bool {
	const module = "github.com/trainyard-dev/trainyard/"
	for _, top := range []string{"hub", "spoke"} {
		if pkg == module+top || strings.HasPrefix(pkg, module+top+"/") {
			return true
		}
	}
	return false
}

// pathTo is an import path from pkg to a package bad says is bad, or nil.
func pathTo(imports map[string][]string, pkg string, bad func(string) bool, seen map[string]bool) []string {
	if bad(pkg) {
		return []string{pkg}
	}
	if seen[pkg] {
		return nil
	}
	seen[pkg] = true
	for _, dep := range imports[pkg] {
		if p := pathTo(imports, dep, bad, seen); p != nil {
			return append([]string{pkg}, p...)
		}
	}
	return nil
}

func TestPathToFindsAnIndirectImport(t *testing.T) {
	imports := map[string][]string{"a": {"b", "x"}, "b": {"c"}, "c": {"hub"}}
	bad := func(p string) bool { return p == "hub" }
	if got := strings.Join(pathTo(imports, "a", bad, map[string]bool{}), " -> "); got != "a -> b -> c -> hub" {
		t.Errorf("pathTo = %q, want a -> b -> c -> hub", got)
	}
	if got := pathTo(imports, "x", bad, map[string]bool{}); got != nil {
		t.Errorf("pathTo = %q, want nil", got)
	}
}

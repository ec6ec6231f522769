package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestCommandName(t *testing.T) {
	cases := map[string]string{
		"trainyard":                        "trainyard",
		"/usr/local/bin/trainyard":         "trainyard",
		"/usr/local/bin/kubectl-trainyard": "kubectl trainyard",
		"kubectl-trainyard.exe":            "kubectl trainyard",
		"kubectl-":                         "trainyard",
		"kubectl-train_yard":               "kubectl train-yard",
	}
	for argv0, want := range cases {
		if got := CommandName(argv0); got != want {
			t.Errorf("CommandName(%q) = %q, want %q", argv0, got, want)
		}
	}
}

// TestUsageNamesThePlugin: installed as kubectl-trainyard, usage lines and
// examples read `kubectl trainyard ...`.
func TestUsageNamesThePlugin(t *testing.T) {
	cases := map[string]struct {
		name string
		args []string
		want []string
	}{
		"plugin": {
			name: "kubectl trainyard", args: []string{"jobs", "--help"},
			want: []string{"Usage:\n  kubectl trainyard jobs [NAME...] [flags]\n", "  kubectl trainyard jobs -A -o wide\n"},
		},
		"binary": {
			args: []string{"--help"},
			want: []string{"Usage:\n  trainyard [command]\n", "  targets     List the targets"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			root := NewRootCommand(Options{Name: tc.name, Streams: Streams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}})
			if code := Execute(context.Background(), root, tc.args); code != 0 {
				t.Fatalf("exit code %d: %s", code, errOut.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("help lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}

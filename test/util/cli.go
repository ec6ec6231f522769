package util

import (
	"bytes"
	"context"
	"strings"

	"github.com/trainyard-dev/trainyard/cmd/trainyard/cli"
)

// TrainyardCLI runs `trainyard args...` in-process against the hub of
// kubeconfig, with no input, and returns what it printed and its exit code.
func TrainyardCLI(kubeconfig string, args ...string) (stdout, stderr string, code int) {
	var out, errOut bytes.Buffer
	root := cli.NewRootCommand(cli.Options{Streams: cli.Streams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}})
	code = cli.Execute(context.Background(), root, append(args, "--kubeconfig", kubeconfig))
	return out.String(), errOut.String(), code
}

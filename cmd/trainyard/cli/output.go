package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"
)

// Output formats of -o, as kubectl names them; "" is the table.
const (
	outputTable = ""
	outputWide  = "wide"
	outputYAML  = "yaml"
	outputJSON  = "json"
	outputName  = "name"
)

// none is what kubectl prints for an empty cell.
const none = "<none>"

// addOutputFlag registers -o with the formats a command supports.
func addOutputFlag(cmd *cobra.Command, out *string, formats ...string) {
	cmd.Flags().StringVarP(out, "output", "o", "", "output format: one of "+strings.Join(formats, "|"))
}

// checkOutput refuses a format the command does not support.
func checkOutput(out string, formats ...string) error {
	if out == outputTable || slices.Contains(formats, out) {
		return nil
	}
	return fmt.Errorf("unable to match a printer suitable for the output format %q, allowed formats are: %s",
		out, strings.Join(formats, ","))
}

// printStructured writes v as YAML or JSON (indented as kubectl does).
func printStructured(w io.Writer, format string, v any) error {
	switch format {
	case outputYAML:
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	case outputJSON:
		b, err := json.MarshalIndent(v, "", "    ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	return fmt.Errorf("output format %q is not structured", format)
}

// list is kubectl's shape for several objects in YAML or JSON.
type list struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Items      []any  `json:"items"`
}

// printItems prints one item alone when the user named exactly one, and a
// List otherwise, as `kubectl get` does.
func printItems[T any](w io.Writer, format string, items []T, single bool) error {
	if single && len(items) == 1 {
		return printStructured(w, format, items[0])
	}
	l := list{APIVersion: "v1", Kind: "List", Items: make([]any, 0, len(items))}
	for _, it := range items {
		l.Items = append(l.Items, it)
	}
	return printStructured(w, format, l)
}

// newTable returns a tab writer laid out as kubectl's tables.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 10, 4, 3, ' ', 0)
}

// row writes one tab-separated table line.
func row(w io.Writer, cells ...string) {
	fmt.Fprintln(w, strings.Join(cells, "\t"))
}

// age is kubectl's short duration since t, or <unknown> for a zero time.
func age(now time.Time, t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

// orNone returns s, or <none> when it is empty.
func orNone(s string) string {
	if s == "" {
		return none
	}
	return s
}

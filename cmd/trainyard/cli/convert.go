package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/cmd/trainyard/convert"
)

// convertOptions are the flags of `trainyard convert`.
type convertOptions struct {
	file        string
	runtime     string
	runtimeKind string
	queue       string
	output      string
	hub         hubFlags
	// kindSet: --runtime-kind was given, and limits the runtimes picked.
	kindSet bool
}

// listTimeout bounds listing the hub's runtimes.
const listTimeout = 30 * time.Second

func newConvertCommand(e *env) *cobra.Command {
	o := convertOptions{}
	cmd := &cobra.Command{
		Use:   "convert -f FILE",
		Short: "Convert PyTorchJobs and MPIJobs to TrainJobs",
		Long: `Convert Training Operator V1 jobs (kubeflow.org/v1 PyTorchJob and MPIJob) and
mpi-operator's kubeflow.org/v2beta1 MPIJobs to Kubeflow Trainer TrainJobs that
refer to a runtime, and print them.

Without --runtime, the runtime is picked from the hub's ClusterTrainingRuntimes
and the TrainingRuntimes of the job's namespace: one with mlPolicy.torch for a
PyTorchJob, mlPolicy.mpi for an MPIJob, Kubeflow's torch-distributed and
deepspeed-distributed first; a note on stderr names it. With --runtime, no
cluster is needed.

numNodes comes from the Worker replicas (plus the Master for a PyTorchJob,
elastic ones included); image, command, args, env and resourcesPerNode from
the training container (the Launcher's command for an MPIJob);
numProcPerNode from nprocPerNode or slotsPerWorker. --queue sets the
kueue.x-k8s.io/queue-name label and -n the namespace; the other labels and
annotations are kept. Every field that a TrainJob cannot carry (sidecars,
volumes, node selectors, restart policies, elastic bounds, ...) is named in
a warning on stderr: move it into the runtime.`,
		Example: e.examples("convert -f pytorchjob.yaml --queue team-a > trainjob.yaml",
			"convert -f mpijob.yaml -n team-a --runtime deepspeed-distributed"),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.kindSet = cmd.Flags().Changed("runtime-kind")
			return runConvert(cmd.Context(), e, o)
		},
	}
	cmd.Flags().StringVarP(&o.file, "filename", "f", "", `file with one or more PyTorchJobs or MPIJobs ("-" reads stdin)`)
	cmd.Flags().StringVar(&o.runtime, "runtime", "", "runtime the TrainJobs refer to (default: one with the job's ML policy on the hub)")
	cmd.Flags().StringVar(&o.runtimeKind, "runtime-kind", trainer.ClusterTrainingRuntimeKind, "kind of the runtime: ClusterTrainingRuntime or TrainingRuntime")
	cmd.Flags().StringVar(&o.queue, "queue", "", "Kueue LocalQueue of the TrainJobs (the kueue.x-k8s.io/queue-name label)")
	o.hub.addTo(cmd, true, false)
	cmd.Flags().Lookup("namespace").Usage = "namespace of the TrainJobs (default: the input's; a job with none looks up TrainingRuntimes in the context's)"
	addOutputFlag(cmd, &o.output, outputYAML, outputJSON)
	_ = cmd.MarkFlagRequired("filename")
	return cmd
}

func runConvert(ctx context.Context, e *env, o convertOptions) error {
	if err := checkOutput(o.output, outputYAML, outputJSON); err != nil {
		return err
	}
	if o.runtimeKind != trainer.ClusterTrainingRuntimeKind && o.runtimeKind != trainer.TrainingRuntimeKind {
		return fmt.Errorf("--runtime-kind must be %s or %s, not %q", trainer.ClusterTrainingRuntimeKind, trainer.TrainingRuntimeKind, o.runtimeKind)
	}
	in, err := readInput(e.In, o.file)
	if err != nil {
		return err
	}
	docs, err := convert.SplitDocuments(in)
	if err != nil {
		return fmt.Errorf("%s: %w", o.file, err)
	}
	if len(docs) == 0 {
		return fmt.Errorf("%s: no objects to convert", o.file)
	}
	opts := convert.Options{Runtime: o.runtime, RuntimeKind: o.runtimeKind, Namespace: o.hub.namespace, Queue: o.queue}
	if o.runtime == "" {
		ctx, cancel := context.WithTimeout(ctx, listTimeout)
		defer cancel()
		kind := ""
		if o.kindSet {
			kind = o.runtimeKind
		}
		open := func() (client.Reader, string, error) {
			h, err := o.hub.connect()
			if err != nil {
				return nil, "", err
			}
			return h, h.Namespace, nil
		}
		opts.PickRuntime = convert.NewRuntimeCatalog(ctx, open, kind, e.ErrOut).Pick
	}
	var jobs []*trainer.TrainJob
	for i, doc := range docs {
		tj, warnings, err := convert.ToTrainJob(doc, opts)
		if err != nil {
			return fmt.Errorf("%s: document %d: %w", o.file, i+1, err)
		}
		for _, w := range warnings {
			fmt.Fprintln(e.ErrOut, "warning:", w)
		}
		jobs = append(jobs, tj)
	}
	return printConverted(e.Out, o.output, jobs)
}

func readInput(stdin io.Reader, file string) ([]byte, error) {
	if file == "-" {
		return io.ReadAll(stdin)
	}
	return os.ReadFile(file)
}

// printConverted writes the TrainJobs as YAML documents, or JSON (a List
// for several, as kubectl prints them).
func printConverted(w io.Writer, format string, jobs []*trainer.TrainJob) error {
	objs := make([]map[string]any, 0, len(jobs))
	for _, tj := range jobs {
		m, err := convert.Manifest(tj)
		if err != nil {
			return err
		}
		objs = append(objs, m)
	}
	if format == outputJSON {
		return printItems(w, outputJSON, objs, true)
	}
	for i, m := range objs {
		if i > 0 {
			fmt.Fprintln(w, "---")
		}
		if err := printStructured(w, outputYAML, m); err != nil {
			return err
		}
	}
	return nil
}

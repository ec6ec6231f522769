package conformance

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/onsi/gomega"
	"sigs.k8s.io/yaml"

	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// TestConvertedExamplesRun converts every PyTorchJob and MPIJob that
// Training Operator and mpi-operator ship as examples with `trainyard
// convert` against the hub (which picks Kubeflow's torch-distributed or
// deepspeed-distributed runtime) for the spokes' queue, set as the sandbox
// sets its own, and submits each as printed, changing only the name (two
// modules ship a tensorflow-mnist). Those requesting CPU, memory or GPUs
// are admitted with the queue's flavor, the others with none; each must
// succeed on a spoke.
func TestConvertedExamplesRun(t *testing.T) {
	g := gomega.NewWithT(t)
	examples, err := tytesting.V1Examples()
	g.Expect(err).NotTo(gomega.HaveOccurred())
	var cells []*cell
	for _, ex := range examples {
		if ex.Skip != "" {
			continue
		}
		path := filepath.Join(t.TempDir(), "job.yaml")
		g.Expect(os.WriteFile(path, ex.JSON, 0o644)).To(gomega.Succeed())
		out, errOut, code := util.TrainyardCLI(env.fleet.Hub.Kubeconfig, "convert", "-f", path, "-n", tenant, "--queue", spokesQueue)
		if code != 0 {
			t.Errorf("%s: trainyard convert exited %d:\n%s", ex.Name, code, errOut)
			continue
		}
		tj := &trainer.TrainJob{}
		g.Expect(yaml.UnmarshalStrict([]byte(out), tj)).To(gomega.Succeed(), "%s: convert printed:\n%s", ex.Name, out)
		tj.Name = exampleName(fmt.Sprintf("v1-%d", len(cells)), tj.Name)
		cells = append(cells, &cell{runtime: tj.Spec.RuntimeRef.Name, target: "spokes", variant: exampleSource(ex.Name), job: tj})
	}
	if len(cells) < 16 {
		t.Fatalf("converted %d example jobs, want the 16 of Training Operator v1.9.3 and mpi-operator v0.8.2", len(cells))
	}
	for _, c := range cells {
		createOrRecord(g, c)
	}
	awaitOutcomes(context.Background(), g, cells, 6*time.Minute)

	var b strings.Builder
	b.WriteString("conformance: Training Operator's and mpi-operator's examples, converted\n")
	for _, c := range cells {
		fmt.Fprintf(&b, "%-64s %-24s %s\n", c.variant, c.runtime, c.outcome)
	}
	fmt.Println(b.String())
	for _, c := range cells {
		if c.ranOn != "spoke1" && c.ranOn != "spoke2" {
			t.Errorf("%s (%s): want Succeeded on a spoke, got %s", c.job.Name, c.variant, c.outcome)
		}
	}
}

// exampleSource shortens module@version/path#doc to module/path.
func exampleSource(name string) string {
	name = strings.TrimPrefix(name, "github.com/kubeflow/")
	if at, slash := strings.Index(name, "@"), strings.Index(name, "/"); at >= 0 && slash > at {
		name = name[:at] + name[slash:]
	}
	return strings.TrimSuffix(name, "#1")
}

package conformance

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainyard-dev/trainyard/test/harness/kube"
	"github.com/trainyard-dev/trainyard/test/util"
)

// TestTrainersExamplesRun submits every TrainJob of the pinned Trainer
// module's examples/ as written (with the runtimes the same files define),
// changing only the namespace, the queue label and, where two files share
// one, the name. They go to spoke1's queue; those that request nothing are
// admitted with no flavor and may run on either spoke (the Slurm target
// takes no flavor-less jobs here, having no containers).
func TestTrainersExamplesRun(t *testing.T) {
	g := gomega.NewWithT(t)
	ctx := context.Background()
	h := env.fleet.Hub.Client
	dir, err := kube.ModuleDir("github.com/kubeflow/trainer/v2")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	var files []string
	g.Expect(filepath.WalkDir(filepath.Join(dir, "examples"), func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() && strings.HasSuffix(p, ".yaml") {
			files = append(files, p)
		}
		return err
	})).To(gomega.Succeed())
	sort.Strings(files)

	var cells []*cell
	for _, f := range files {
		objs, err := util.ReadManifests(f)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		stem := strings.TrimSuffix(filepath.Base(f), ".yaml")
		for _, o := range objs {
			switch o.GetKind() {
			case trainer.TrainingRuntimeKind, trainer.ClusterTrainingRuntimeKind:
				if o.GetKind() == trainer.TrainingRuntimeKind {
					o.SetNamespace(tenant)
				}
				if err := h.Create(ctx, o); client.IgnoreAlreadyExists(err) != nil {
					t.Fatalf("%s: create %s %s: %v", f, o.GetKind(), o.GetName(), err)
				}
			case trainer.TrainJobKind:
				tj := &trainer.TrainJob{}
				g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, tj)).To(gomega.Succeed())
				tj.Namespace = tenant
				tj.Name = exampleName(stem, tj.Name)
				if tj.Labels == nil {
					tj.Labels = map[string]string{}
				}
				tj.Labels["kueue.x-k8s.io/queue-name"] = queueOf("spoke1")
				cells = append(cells, &cell{runtime: tj.Spec.RuntimeRef.Name, target: "spokes", variant: stem, job: tj})
			}
		}
	}
	if len(cells) < 7 {
		t.Fatalf("found %d example TrainJobs, want Trainer v2.3's 8", len(cells))
	}
	for _, c := range cells {
		createOrRecord(g, c)
	}
	awaitOutcomes(ctx, g, cells, 6*time.Minute)

	var b strings.Builder
	b.WriteString("conformance: Kubeflow Trainer's example TrainJobs\n")
	for _, c := range cells {
		fmt.Fprintf(&b, "%-28s %-36s %s\n", c.variant, c.job.Name, c.outcome)
	}
	fmt.Println(b.String())
	for _, c := range cells {
		switch {
		case strings.Contains(c.variant, "volcano"):
			// Volcano's PodGroup needs its scheduler on the spoke.
			if !strings.Contains(c.refused, "podGroupPolicy") {
				t.Errorf("%s: want a refusal naming podGroupPolicy, got %s", c.job.Name, c.outcome)
			}
		case c.ranOn != "spoke1" && c.ranOn != "spoke2":
			t.Errorf("%s (%s): want Succeeded on a spoke, got %s", c.job.Name, c.variant, c.outcome)
		}
	}
}

// exampleName keeps the example's name, prefixed by its file so two files'
// jobs of one name do not collide.
func exampleName(stem, name string) string {
	n := strings.TrimLeft(strings.TrimLeft(stem, "0123456789"), "-") + "-" + name
	if len(n) > 63 {
		n = strings.TrimRight(n[:63], "-")
	}
	return n
}

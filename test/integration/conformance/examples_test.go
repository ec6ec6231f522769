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
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueueconstants "sigs.k8s.io/kueue/pkg/controller/constants"

	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	"github.com/trainyard-dev/trainyard/test/util"
)

// TestTrainersExamplesRun submits every TrainJob of the pinned Trainer
// module's examples/ as written (with the runtimes the same files define),
// changing only the namespace, the queue label and, where two files share
// one, the name. They go to the spokes' queue, set as the sandbox sets its
// own (spokesQueue): those requesting CPU and memory (runtime-patches,
// kueue-integration, multi-step) are admitted with its flavor, those that
// request nothing with no flavor, and either kind may run on either spoke
// (the Slurm target takes no flavor-less jobs here, having no containers).
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
				tj.Labels[kueueconstants.QueueLabel] = spokesQueue
				cells = append(cells, &cell{runtime: tj.Spec.RuntimeRef.Name, target: "spokes", variant: stem, job: tj})
				if cp := withControlPlaneToleration(tj); cp != nil {
					cells = append(cells, &cell{runtime: tj.Spec.RuntimeRef.Name, target: "spokes", variant: stem + controlPlaneVariant, job: cp})
				}
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
		case strings.HasSuffix(c.variant, controlPlaneVariant):
			// The Targets allow the example's own toleration, not this one.
			if !strings.Contains(c.refused, `tolerations: taint key "`+controlPlaneTaint+`" is not allowed on this target`) {
				t.Errorf("%s: want a refusal naming the control-plane toleration, got %s", c.job.Name, c.outcome)
			}
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

// controlPlaneVariant names the copy of an example whose runtime patch
// also tolerates the control plane's taint (withControlPlaneToleration).
const (
	controlPlaneVariant = "+control-plane"
	controlPlaneTaint   = "node-role.kubernetes.io/control-plane"
)

// withControlPlaneToleration returns a copy of tj whose first runtime patch
// that sets pod tolerations also tolerates the control plane's taint, as a
// tenant aiming at control-plane nodes would write it; nil when tj has no
// such patch.
func withControlPlaneToleration(tj *trainer.TrainJob) *trainer.TrainJob {
	cp := tj.DeepCopy()
	for _, p := range cp.Spec.RuntimePatches {
		if p.TrainingRuntimeSpec == nil || p.TrainingRuntimeSpec.Template == nil || p.TrainingRuntimeSpec.Template.Spec == nil {
			continue
		}
		for _, rj := range p.TrainingRuntimeSpec.Template.Spec.ReplicatedJobs {
			if rj.Template == nil || rj.Template.Spec == nil || rj.Template.Spec.Template == nil || rj.Template.Spec.Template.Spec == nil {
				continue
			}
			if spec := rj.Template.Spec.Template.Spec; len(spec.Tolerations) > 0 {
				spec.Tolerations = append(spec.Tolerations, corev1.Toleration{Key: controlPlaneTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
				cp.Name = strings.TrimRight(cp.Name[:min(len(cp.Name), 60)], "-") + "-cp"
				return cp
			}
		}
	}
	return nil
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

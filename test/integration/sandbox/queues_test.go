package sandbox

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueueconstants "sigs.k8s.io/kueue/pkg/controller/constants"
	"sigs.k8s.io/yaml"

	kube "github.com/trainyard-dev/trainyard/cmd/trainyard/sandbox/fleet"
	tytesting "github.com/trainyard-dev/trainyard/internal/testing"
	"github.com/trainyard-dev/trainyard/test/util"
)

// The sandbox's general queue and flavor (cmd/trainyard/sandbox).
const (
	sandboxNamespace = "team-a"
	sandboxQueue     = "lq"
	sandboxFlavor    = "gpu"
)

// TestQueuesAdmitCPUAndMemory submits to the sandbox's queue team-a/lq, as
// its users would, jobs that request CPU and memory: Trainer's
// 05-multi-step example unchanged (only its namespace and queue label set)
// and mpi-operator's pi converted by the CLI. Kueue must admit each with
// the sandbox's flavor for cpu and memory, and each must complete.
func TestQueuesAdmitCPUAndMemory(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	dir := t.TempDir()
	up := exec.Command(cliPath, upArgs(dir, "--detach", "--timeout", "8m")...)
	up.Dir = repo
	out, err := up.CombinedOutput()
	t.Cleanup(func() {
		if out, err := exec.Command(cliPath, "dev", "down", "--dir", dir).CombinedOutput(); err != nil {
			t.Errorf("dev down: %v\n%s", err, out)
		}
	})
	g.Expect(err).NotTo(HaveOccurred(), "dev up --detach:\n%s", out)
	kubeconfig := filepath.Join(dir, "hub", "admin.kubeconfig")
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	h, err := client.New(cfg, client.Options{Scheme: kube.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())

	jobs := []*trainer.TrainJob{multiStepExample(g, h), convertedPi(g, h, kubeconfig)}
	for _, tj := range jobs {
		util.CreateTrainJob(g, h, tj)
	}
	for _, tj := range jobs {
		wl := util.WorkloadOf(g, h, tj)
		g.Eventually(func(g Gomega) {
			g.Expect(h.Get(ctx, client.ObjectKeyFromObject(wl), wl)).To(Succeed())
			g.Expect(wl.Status.Admission).NotTo(BeNil(), "%s is not admitted: %v", tj.Name, wl.Status.Conditions)
			for _, a := range wl.Status.Admission.PodSetAssignments {
				// 05-multi-step's initializer requests nothing: no flavor.
				for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
					if f, ok := a.Flavors[r]; ok {
						g.Expect(string(f)).To(Equal(sandboxFlavor), "%s pod set %s: %s", tj.Name, a.Name, r)
					}
				}
			}
			g.Expect(wl.Status.Admission.PodSetAssignments).To(ContainElement(
				HaveField("Flavors", HaveKey(corev1.ResourceMemory))), "%s: no pod set was admitted for its memory", tj.Name)
		}, 2*time.Minute, time.Second).Should(Succeed())
	}
	for _, tj := range jobs {
		g.Eventually(func(g Gomega) {
			g.Expect(h.Get(ctx, client.ObjectKeyFromObject(tj), tj)).To(Succeed())
			g.Expect(apimeta.FindStatusCondition(tj.Status.Conditions, trainer.TrainJobFailed)).To(BeNil(), "%s failed", tj.Name)
			g.Expect(apimeta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete)).To(BeTrue(),
				"%s is not complete: %v", tj.Name, tj.Status.Conditions)
		}, 5*time.Minute, 2*time.Second).Should(Succeed())
	}
}

// multiStepExample creates the runtime of Trainer's 05-multi-step example
// in the sandbox's namespace and returns its TrainJob, queued there.
func multiStepExample(g *WithT, h client.Client) *trainer.TrainJob {
	dir, err := kube.ModuleDir("github.com/kubeflow/trainer/v2")
	g.Expect(err).NotTo(HaveOccurred())
	objs, err := util.ReadManifests(filepath.Join(dir, "examples", "yaml", "05-multi-step.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	var tj *trainer.TrainJob
	for _, o := range objs {
		o.SetNamespace(sandboxNamespace)
		switch o.GetKind() {
		case trainer.TrainingRuntimeKind:
			g.Expect(h.Create(context.Background(), o)).To(Succeed())
		case trainer.TrainJobKind:
			tj = &trainer.TrainJob{}
			g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, tj)).To(Succeed())
		}
	}
	g.Expect(tj).NotTo(BeNil(), "05-multi-step.yaml holds no TrainJob")
	g.Expect(tj.Spec.Trainer.ResourcesPerNode.Requests).To(HaveKey(corev1.ResourceMemory), "the example no longer requests memory")
	tj.Labels = map[string]string{kueueconstants.QueueLabel: sandboxQueue}
	return tj
}

// convertedPi applies Kubeflow's runtimes to the hub and returns
// mpi-operator's pi example as `trainyard convert` prints it for the
// sandbox's queue (deepspeed-distributed, 1 CPU per node).
func convertedPi(g *WithT, h client.Client, kubeconfig string) *trainer.TrainJob {
	rts, err := tytesting.AllShippedRuntimes()
	g.Expect(err).NotTo(HaveOccurred())
	for _, rt := range rts {
		g.Expect(h.Create(context.Background(), rt)).To(Succeed())
	}
	examples, err := tytesting.V1Examples()
	g.Expect(err).NotTo(HaveOccurred())
	var path string
	for _, ex := range examples {
		if strings.Contains(ex.Name, "kubeflow/mpi-operator@") && strings.HasSuffix(ex.Name, "/examples/v2beta1/pi/pi.yaml#1") {
			path = ex.Path
		}
	}
	g.Expect(path).NotTo(BeEmpty(), "mpi-operator's pi example is not among %d examples", len(examples))
	cmd := exec.Command(cliPath, "convert", "-f", path, "-n", sandboxNamespace, "--queue", sandboxQueue, "--kubeconfig", kubeconfig)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	g.Expect(err).NotTo(HaveOccurred(), "trainyard convert:\n%s", stderr.String())
	tj := &trainer.TrainJob{}
	g.Expect(yaml.UnmarshalStrict(out, tj)).To(Succeed(), "trainyard convert printed:\n%s", out)
	g.Expect(tj.Spec.Trainer.ResourcesPerNode.Limits).To(HaveKey(corev1.ResourceCPU), "pi no longer asks for CPU:\n%s", out)
	return tj
}
